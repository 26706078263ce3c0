import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { startGateway, testedDataPlanes } from '../harness/gateway-cluster.js';
import { waitFor } from '../harness/wait.js';
import { openStore } from '../../src/store/open-store.js';
import { serviceKey, unitStatusKey } from '../../src/store/keys.js';

// Internal stays internal, on both data planes: a gateway listening on an address that is not
// loopback (here 0.0.0.0) routes only the public domain there and answers its own endpoints only
// for its own address (`/readyz` here: `/routes` would also want a token off loopback); the internal domain is served on its internal listener (127.0.0.1). Real
// etcd and gateway processes; the unit is a Node server whose status is written as an agent would.

const etcd = await startEtcd();
const store = await openStore({ etcd: [etcd.url], dataDir: '' });
const unit = createServer((_req, res) => res.end('unit\n'));
await new Promise<void>((resolve) => unit.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  unit.closeAllConnections();
  await new Promise((resolve) => unit.close(resolve));
  await store.close();
  await etcd.stop();
});

await store.put(serviceKey('shop'), JSON.stringify({ name: 'shop', loadBalanced: true, publicFacing: true }));
await store.put(
  unitStatusKey('local', 'shop-1.service@x'),
  JSON.stringify({ unit: 'shop-1.service', service: 'shop', instance: 1, machine: 'local', active: 'active', sub: 'running', address: `127.0.0.1:${(unit.address() as AddressInfo).port}` }),
);

async function get(port: number, host: string, path = '/') {
  const response = await request(`http://127.0.0.1:${port}${path}`, { headers: { host } });
  return { status: response.statusCode, text: await response.body.text() };
}

for (const plane of testedDataPlanes()) {
  t.test(`the ${plane} data plane on 0.0.0.0 keeps the internal domain and its own endpoints to themselves`, async (t) => {
    const internalPort = await freePort();
    const gateway = await startGateway(plane, ['--etcd', etcd.url, '--host', '0.0.0.0', '--internal-port', String(internalPort)]);
    t.teardown(() => gateway.stop());
    await waitFor(async () => (await get(internalPort, 'shop.platform.internal')).status === 200, 20_000, { what: 'the internal listener to route shop' });

    t.equal((await get(gateway.port, 'shop.platform.local')).text, 'unit\n', 'the public listener routes the public domain');
    t.same(await get(internalPort, 'shop.platform.internal'), { status: 200, text: 'unit\n' }, 'the internal listener routes the internal domain');
    const hidden = await get(gateway.port, 'shop.platform.internal');
    t.equal(hidden.status, 404, 'the public listener answers an internal host as an unknown one');
    t.same(JSON.parse(hidden.text), { statusCode: 404, error: 'Not Found', message: 'no service is reachable at shop.platform.internal' });

    t.equal((await get(gateway.port, `127.0.0.1:${gateway.port}`, '/readyz')).status, 200, 'its own endpoints answer its own address');
    t.equal((await get(gateway.port, 'nope.example', '/readyz')).status, 404, 'not an unknown host');
    t.equal((await get(gateway.port, 'nope.platform.local', '/readyz')).status, 404, 'not a service host');
    t.equal((await get(internalPort, '127.0.0.1', '/readyz')).status, 200, 'the internal listener answers them as a loopback listener does');
  });
}
