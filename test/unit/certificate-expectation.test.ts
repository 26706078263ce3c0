import t from 'tap';
import { isPublicDomain, whyNoCertificate } from '../../src/certificates/certificate-expectation.js';

// The HTTPS line says why no certificate will come, instead of "no certificate yet" for ever.

t.test('domains no public DNS answers for are told apart from public ones', async (t) => {
  for (const domain of ['platform.local', 'apps.internal', 'example.test', 'home.arpa', 'localhost', 'intranet', '10.0.0.5', 'box.lan']) t.notOk(isPublicDomain(domain), domain);
  for (const domain of ['apps.example.com', 'platform.example.org.']) t.ok(isPublicDomain(domain), domain);
});

t.test('the reason names what is missing, and an operator certificate as the way out', async (t) => {
  const base = { domain: 'apps.example.com', gateways: 2, acmeGateways: 0, singleMachine: false };
  t.match(whyNoCertificate('web.platform.local', { ...base, domain: 'platform.local' }), /^platform\.local is not a public DNS domain, .*platform cert add web\.platform\.local/);
  t.match(whyNoCertificate('web.apps.example.com', base), /no gateway orders certificates from ACME \(none runs with --acme-email\)/);
  t.match(whyNoCertificate('web.apps.example.com', { ...base, singleMachine: true }), /^single-machine mode \(platform up\)/);
  t.match(whyNoCertificate('web.apps.example.com', { ...base, gateways: 0 }), /^no gateway is running/);
  t.equal(whyNoCertificate('web.apps.example.com', { ...base, acmeGateways: 1 }), undefined, 'with ACME on, one is coming');
});
