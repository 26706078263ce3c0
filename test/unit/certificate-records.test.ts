import t from 'tap';
import { leftByDeletedServices, servingHosts, type HostCertificateState } from '../../src/certificates/certificate-records.js';

// What a deleted service leaves of HTTPS, and which routed hosts a certificate serves.

const acme = (host: string, modRevision = 7, acmeState = true): HostCertificateState => ({ host, certificate: { source: 'acme', modRevision }, acmeState });
const operator = (host: string, acmeState = false): HostCertificateState => ({ host, certificate: { source: 'operator', modRevision: 3 }, acmeState });

t.test("a deleted service's ACME certificate is removed at the revision read, with its order state", async (t) => {
  t.same(leftByDeletedServices([acme('shop.example.test', 42)], new Set(['other'])), [{ host: 'shop.example.test', service: 'shop', certificateRevision: 42 }]);
});

t.test("a declared service's certificate and a component's are kept", async (t) => {
  t.same(leftByDeletedServices([acme('shop.example.test'), acme('orchestrator.example.test'), acme('web.example.test')], new Set(['shop'])), []);
});

t.test("an operator's certificate stays; only the order state a deleted service left goes", async (t) => {
  t.same(leftByDeletedServices([operator('shop.example.test'), operator('*.example.test', true)], new Set()), []);
  t.same(leftByDeletedServices([operator('shop.example.test', true)], new Set()), [{ host: 'shop.example.test', service: 'shop' }], 'its ACME status and lock, not the certificate');
});

t.test('an order that never produced a certificate leaves its status and lock to remove', async (t) => {
  t.same(leftByDeletedServices([{ host: 'blocked.example.test', acmeState: true }], new Set()), [{ host: 'blocked.example.test', service: 'blocked' }]);
});

t.test('a wildcard serves the routed hosts one label under it that have no certificate of their own', async (t) => {
  const routed = ['a.example.test', 'b.example.test', 'c.sub.example.test'];
  const stored = new Set(['*.example.test', 'b.example.test', 'gone.example.test']);
  t.same(servingHosts('*.example.test', stored, routed), ['a.example.test']);
  t.same(servingHosts('b.example.test', stored, routed), ['b.example.test']);
  t.same(servingHosts('gone.example.test', stored, routed), [], "a deleted service's host serves nothing");
});
