import t from 'tap';
import type { PlannedRoute } from '../../src/roles/gateway/route-plan.js';
import { backendName, haproxyConfig, hostsMapFile, slotName, slotsFor, unitsMapFile, type HaproxyConfigInput } from '../../src/roles/gateway/haproxy-config.js';
import { backendConfigs, emptyState, reloaded, transition, type HaproxyState } from '../../src/roles/gateway/haproxy-slots.js';
import { renderError } from '../../src/roles/gateway/gateway-error.js';
import { parseStat } from '../../src/roles/gateway/haproxy-runtime.js';
import { certificateChanges, crtListFile, pemBundle, PLACEHOLDER_NAME, type CertificatePaths } from '../../src/roles/gateway/haproxy-certificates.js';

// The HAProxy data plane's pure parts: the configuration it writes, and the Runtime API commands
// that take HAProxy from one route plan to the next (checked against a model of what HAProxy does
// with them, over random sequences of plans).

const files = { runtimeSocket: '/s/runtime.sock', pidFile: '/s/haproxy.pid', hostsMap: '/s/hosts.map', unitsMap: '/s/units.map', errorsDir: '/s/errors', lua: '/s/c.lua' };
const settings = {
  threads: 2,
  requestTimeoutSeconds: 60,
  idleTimeoutSeconds: 60,
  headersTimeoutSeconds: 10,
  maxHeaderSize: 16384,
  maxConnections: 2048,
  maxConnectionsPerAddress: 256,
  upstreamConnections: 128,
};

const route = (name: string, addresses: string[], kind: 'service' | 'component' = 'service'): PlannedRoute => ({
  name,
  kind,
  hosts: [`${name}.platform.internal`],
  targets: addresses.map((address, i) => ({ address, unit: `${name}-${i + 1}.service` })),
});

const configFor = (state: HaproxyState): string => {
  const input: HaproxyConfigInput = { listeners: [{ host: '127.0.0.1', port: 8080, name: 'public' }], internalDomain: 'platform.internal', ownPort: 4000, settings, files, backends: backendConfigs(state) };
  return haproxyConfig(input);
};

t.test('the configuration has one backend per route with its slots, units in the ready ones, and threads as given', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80', '10.0.0.2:80']), route('orchestrator', ['127.0.0.1:9000'], 'component')]);
  const config = configFor(state);
  t.match(config, /^ {2}nbthread 2$/m);
  t.match(config, /^ {2}bind 127\.0\.0\.1:8080 name public proto h1$/m);
  t.notMatch(config, /public_listener/, 'a lone (loopback) listener serves both domains');
  t.match(config, /^ {2}stats socket \/s\/runtime\.sock mode 600 level admin expose-fd listeners$/m);
  t.match(config, /^backend s_web$/m);
  t.match(config, /^backend c_orchestrator$/m);
  t.match(config, /^ {2}server s_web-1 10\.0\.0\.1:80 maxconn 128$/m);
  t.match(config, /^ {2}server s_web-2 10\.0\.0\.2:80 maxconn 128$/m);
  t.match(config, /^ {2}server s_web-3 127\.0\.0\.1:1 disabled maxconn 128$/m, 'free slots are disabled');
  t.equal(config.match(/^ {2}server s_web-/gm)!.length, slotsFor(2));
  t.match(config, /^ {2}balance leastconn$/m);
  t.match(config, /^ {2}retry-on conn-failure empty-response$/m);
  t.match(config, /^ {2}server own 127\.0\.0\.1:4000$/m, 'unrouted requests reach the Node server');
  t.match(config, /map_str\(\/s\/hosts\.map\)/);
  t.equal(hostsMapFile(state.hosts), 'web.platform.internal s_web\norchestrator.platform.internal c_orchestrator\n');
  t.match(unitsMapFile(backendConfigs(state)), /^s_web-1 web-1\.service\ns_web-2 web-2\.service\ns_web-3 -\n/);
});

t.test('per-request rules scan the headers once where one scan does: the X-Forwarded-For count, the hop-by-hop headers each way', async (t) => {
  const config = configFor(reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]));
  t.equal(config.match(/req\.fhdr_cnt\(x-forwarded-for\)/g)?.length, 1, 'the count is taken once, into a variable');
  t.match(config, /^ {2}http-request set-var\(txn\.xff_count\) req\.fhdr_cnt\(x-forwarded-for\) if routed \|\| !loopback$/m);
  t.match(config, /^ {2}http-request del-header \^\(proxy-authorization\|proxy-connection\|te\|trailer\|keep-alive\)\$ -m reg if routed$/m);
  t.match(config, /^ {2}http-response del-header \^\(keep-alive\|trailer\|proxy-authenticate\)\$ -m reg$/m);
  t.equal(config.match(/del-header (proxy-|te |trailer|keep-alive)/g), null, 'no rule per header');
  t.match(config, /regsub\(\[\.\]\$,\) if \{ var\(txn\.host\) -m end \. \}$/m, 'the trailing dot is removed only when there is one');
});

t.test('IPv6 listeners and units are written with their family prefix; with an internal listener the public one routes no internal host', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['[fd00::1]:80'])]);
  const config = haproxyConfig({ listeners: [{ host: '::', port: 80, name: 'public' }, { host: '10.0.0.5', port: 81, name: 'internal' }], internalDomain: 'platform.internal', ownPort: 4000, settings, files, backends: backendConfigs(state) });
  t.match(config, /^ {2}bind ipv6@:::80 name public proto h1$/m);
  t.match(config, /^ {2}bind 10\.0\.0\.5:81 name internal proto h1$/m);
  t.match(config, /^ {2}http-request unset-var\(txn\.backend\) if public_listener \{ var\(txn\.host\) -m end \.platform\.internal \}$/m, 'the public listener routes no internal host');
  t.match(config, /^ {2}server s_web-1 ipv6@fd00::1:80 maxconn 128$/m);
});

t.test('the 503 answer files are the Node data plane’s bodies byte for byte', async (t) => {
  const { errorFiles } = await import('../../src/roles/gateway/haproxy-config.js');
  const bodies = errorFiles({ name: 's_web', route: 'web', kind: 'service', slots: [] });
  t.equal(bodies.jsonBody, renderError({ status: 503, message: 'service web has no healthy unit', retryAfter: 2 }, false).body);
  t.equal(bodies.jsonBody, '{"statusCode":503,"error":"Service Unavailable","message":"service web has no healthy unit"}\n');
  t.match(bodies.htmlBody, /^<!doctype html>/);
});

t.test('a unit joining, draining and coming back is three runtime commands each, no reload', async (t) => {
  let state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  const joined = transition(state, [route('web', ['10.0.0.1:80', '10.0.0.2:80'])], files);
  t.notOk(joined.reload);
  t.same(joined.commands, ['set server s_web/s_web-2 addr 10.0.0.2 port 80', 'set map /s/units.map s_web-2 web-2.service', 'set server s_web/s_web-2 state ready']);
  state = joined.next;
  const drained = transition(state, [route('web', ['10.0.0.2:80'])].map((r) => ({ ...r, targets: [{ address: '10.0.0.2:80', unit: 'web-2.service' }] })), files);
  t.same(drained.commands, ['set server s_web/s_web-1 state drain']);
  const back = transition(drained.next, [route('web', ['10.0.0.1:80', '10.0.0.2:80'])], files);
  t.same(back.commands, ['set server s_web/s_web-1 state ready'], 'a draining unit that is routable again is readied in its slot');
});

t.test('a new service or more units than slots need a reload; what fits is applied meanwhile', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  const step = transition(state, [route('web', ['10.0.0.1:80', '10.0.0.2:80']), route('api', ['10.0.0.9:80'])], files);
  t.ok(step.reload, 'api has no backend yet');
  t.ok(step.commands.includes('set server s_web/s_web-2 state ready'), 'web is updated without waiting for it');
  t.notOk(step.commands.some((command) => command.includes('api.platform.internal')), 'api reaches the map with the reload');
  const many = Array.from({ length: slotsFor(1) + 1 }, (_, i) => `10.0.1.${i}:80`);
  t.ok(transition(state, [route('web', many)], files).reload, 'more units than slots');
  t.notOk(transition(state, [route('web', ['10.0.0.1:80']), route('idle', [])], files).reload, 'a service without units needs no backend yet');
  const grown = reloaded(state, [route('web', many)]);
  t.equal(grown.backends.get('s_web')!.slots.length, slotsFor(many.length));
});

t.test('a host whose backend has no unit is left to the Node server (it answers 503 as it would alone)', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  t.same([...state.hosts], [['web.platform.internal', 's_web']]);
  const emptied = transition(state, [route('web', [])], files);
  t.same(emptied.commands, ['set server s_web/s_web-1 state drain', 'del map /s/hosts.map web.platform.internal']);
});

/** What HAProxy does with the commands: servers by name, and the hosts map. */
interface Model {
  servers: Map<string, { address: string; state: string }>;
  hosts: Map<string, string>;
}

function modelOf(state: HaproxyState): Model {
  const servers = new Map<string, { address: string; state: string }>();
  for (const backend of backendConfigs(state)) {
    backend.slots.forEach((slot, index) => servers.set(`${backend.name}/${slotName(backend.name, index)}`, { address: slot.address ?? '127.0.0.1:1', state: slot.address ? 'ready' : 'maint' }));
  }
  return { servers, hosts: new Map(state.hosts) };
}

function run(model: Model, command: string): void {
  let match: RegExpExecArray | null;
  if ((match = /^set server (\S+) addr (\S+) port (\d+)$/.exec(command))) model.servers.get(match[1]!)!.address = `${match[2]}:${match[3]}`;
  else if ((match = /^set server (\S+) state (\S+)$/.exec(command))) model.servers.get(match[1]!)!.state = match[2]!;
  else if ((match = /^add map \/s\/hosts\.map (\S+) (\S+)$/.exec(command))) {
    if (model.hosts.has(match[1]!)) throw new Error(`add map of an existing key: ${command}`);
    model.hosts.set(match[1]!, match[2]!);
  } else if ((match = /^set map \/s\/hosts\.map (\S+) (\S+)$/.exec(command))) {
    if (!model.hosts.has(match[1]!)) throw new Error(`set map of a missing key: ${command}`);
    model.hosts.set(match[1]!, match[2]!);
  } else if ((match = /^del map \/s\/hosts\.map (\S+)$/.exec(command))) model.hosts.delete(match[1]!);
  else if (!/^set map \/s\/units\.map /.test(command)) throw new Error(`unexpected command ${command}`);
}

/** Whether HAProxy, as modelled, routes exactly as the plan says. */
function matches(model: Model, plan: readonly PlannedRoute[]): string | undefined {
  for (const planned of plan) {
    const name = backendName(planned.name, planned.kind);
    const ready = [...model.servers].filter(([server, s]) => server.startsWith(`${name}/`) && s.state === 'ready').map(([, s]) => s.address).sort();
    const wanted = planned.targets.map((target) => target.address).sort();
    if (JSON.stringify(ready) !== JSON.stringify(wanted)) return `${planned.name}: ready ${ready.join(' ')}, planned ${wanted.join(' ')}`;
    for (const host of planned.hosts) {
      const mapped = model.hosts.get(host);
      if (wanted.length > 0 ? mapped !== name : mapped !== undefined) return `${host} maps to ${mapped}`;
    }
  }
  const hosts = new Set(plan.flatMap((planned) => planned.hosts));
  for (const host of model.hosts.keys()) if (!hosts.has(host)) return `${host} is still mapped`;
  return undefined;
}

t.test('over random plans, the commands (and reloads) leave HAProxy routing exactly as planned', async (t) => {
  let seed = 7;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  let reloads = 0;
  let commands = 0;
  for (let run_ = 0; run_ < 20; run_++) {
    let state = emptyState();
    let model = modelOf(state);
    for (let step = 0; step < 100; step++) {
      const plan = ['a', 'b', 'c']
        .filter(() => random(5) > 0)
        .map((name) => route(name, [...new Set(Array.from({ length: random(7) }, () => `10.0.${random(3)}.${random(6)}:80`))]));
      const next = transition(state, plan, files);
      for (const command of next.commands) run(model, command);
      commands += next.commands.length;
      state = next.next;
      if (next.reload) {
        reloads += 1;
        state = reloaded(state, plan);
        model = modelOf(state);
      }
      const wrong = matches(model, plan);
      if (wrong !== undefined) return t.fail(`run ${run_}, step ${step}: ${wrong}`);
    }
  }
  t.pass(`2000 plans applied: ${commands} commands, ${reloads} reloads`);
  t.ok(reloads < 200, 'reloads are the exception');
});

t.test('show stat is read by its CSV header', async (t) => {
  const rows = parseStat('# pxname,svname,scur,status\ns_web,s_web-1,3,UP\ns_web,BACKEND,3,UP\n');
  t.same(rows, [
    { pxname: 's_web', svname: 's_web-1', scur: '3', status: 'UP' },
    { pxname: 's_web', svname: 'BACKEND', scur: '3', status: 'UP' },
  ]);
});

// HTTPS on the HAProxy plane: the TLS bind and the rules around it, the crt-list file, and the
// Runtime API commands for certificates coming, renewed and going (https.test.ts runs them against a real HAProxy).

const base: HaproxyConfigInput = { listeners: [{ host: '0.0.0.0', port: 8080, name: 'public' }], internalDomain: 'platform.internal', ownPort: 4000, settings, files, backends: [] };
const tls = { host: '0.0.0.0', port: 8443, crtList: '/s/certs.list', domain: 'example.test' };

t.test('with TLS: a strict-SNI bind on the HTTPS port with the crt-list, TLS 1.2+, HTTP/2 by ALPN; X-Forwarded-Proto by the connection', async (t) => {
  const config = haproxyConfig({ ...base, tls });
  t.match(config, /^ {2}bind 0\.0\.0\.0:8443 name https ssl crt-list \/s\/certs\.list strict-sni ssl-min-ver TLSv1\.2 alpn h2,http\/1\.1$/m);
  t.match(config, /^ {2}http-request set-header x-forwarded-proto %\[ssl_fc,iif\(https,http\)\] if routed$/m);
  t.notMatch(config, /strict-transport-security/, 'no HSTS unless asked for');
  const ipv6 = haproxyConfig({ ...base, tls: { ...tls, host: '::' } });
  t.match(ipv6, /^ {2}bind ipv6@:::8443 name https ssl /m);
  t.notMatch(haproxyConfig(base), /crt-list/, 'no TLS bind without --https-port');
});

t.test('HSTS over TLS for the public hosts only; the redirect to HTTPS is for plain requests only', async (t) => {
  const config = haproxyConfig({ ...base, tls: { ...tls, hstsMaxAgeSeconds: 600 }, httpsRedirectDomain: 'example.test' });
  t.match(config, /^ {2}http-response set-header strict-transport-security max-age=600 if \{ ssl_fc \} routed \{ var\(txn\.host\) -m reg \^\[\^\.\]\+\[\.\]example\[\.\]test\$ \}$/m);
  const pattern = new RegExp('^[^.]+[.]example[.]test$');
  t.ok(pattern.test('shop.example.test'));
  t.notOk(pattern.test('shop.internal.example.test'), 'an internal domain under the public one gets no HSTS');
  t.notOk(pattern.test('shop.example.testing'));
  t.match(config, /^ {2}http-request unset-var\(txn\.backend\) if !\{ ssl_fc \} \{ var\(txn\.host\) -m end \.example\.test \}$/m);
});

t.test('with an internal listener, the HTTPS bind counts as public', async (t) => {
  const config = haproxyConfig({ ...base, listeners: [...base.listeners, { host: '10.0.0.5', port: 81, name: 'internal' }], tls });
  t.match(config, /^ {2}acl public_listener so_name public https$/m);
});

const paths: CertificatePaths = { crtList: '/s/certs.list', placeholder: '/s/certs/placeholder.pem', fileOf: (host) => `/s/certs/${host}.pem` };

t.test('the crt-list: the placeholder first, then one line per served host filtered to that host', async (t) => {
  t.equal(crtListFile(new Map(), paths), `/s/certs/placeholder.pem ${PLACEHOLDER_NAME}\n`);
  t.equal(
    crtListFile(new Map([['b.example.test', 'f2'], ['a.example.test', 'f1']]), paths),
    `/s/certs/placeholder.pem ${PLACEHOLDER_NAME}\n/s/certs/a.example.test.pem a.example.test\n/s/certs/b.example.test.pem b.example.test\n`,
  );
});

t.test('a PEM bundle has no empty line (a Runtime API payload ends at one)', async (t) => {
  const bundle = pemBundle({ chain: '-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n\n-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\r\n', key: '\n-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n' });
  t.notMatch(bundle, /\n\n/);
  t.notMatch(bundle, /\r/);
  t.match(bundle, /^-----BEGIN CERTIFICATE-----\nA\n.*K\n-----END PRIVATE KEY-----$/s);
});

t.test('certificate changes: new hosts are loaded and listed, renewals set and committed in place, gone hosts unlisted and freed', async (t) => {
  const pem = (host: string) => `PEM-${host}`;
  const live = new Map([['a.example.test', 'f1'], ['b.example.test', 'f2']]);
  const wanted = new Map([['a.example.test', 'f1'], ['b.example.test', 'f3'], ['c.example.test', 'f4']]);
  t.same(certificateChanges(live, live, paths, pem), [], 'nothing changed, no command');
  const changes = certificateChanges(live, wanted, paths, pem);
  t.same(changes, [
    { host: 'b.example.test', kind: 'update', commands: ['set ssl cert /s/certs/b.example.test.pem <<\nPEM-b.example.test\n', 'commit ssl cert /s/certs/b.example.test.pem'] },
    {
      host: 'c.example.test',
      kind: 'add',
      commands: [
        'new ssl cert /s/certs/c.example.test.pem',
        'set ssl cert /s/certs/c.example.test.pem <<\nPEM-c.example.test\n',
        'commit ssl cert /s/certs/c.example.test.pem',
        'add ssl crt-list /s/certs.list <<\n/s/certs/c.example.test.pem c.example.test\n',
      ],
    },
  ]);
  const removed = certificateChanges(wanted, new Map([['c.example.test', 'f4']]), paths, pem);
  t.same(removed.map(({ host, kind, commands }) => [host, kind, commands]), [
    ['a.example.test', 'remove', ['del ssl crt-list /s/certs.list /s/certs/a.example.test.pem', 'del ssl cert /s/certs/a.example.test.pem']],
    ['b.example.test', 'remove', ['del ssl crt-list /s/certs.list /s/certs/b.example.test.pem', 'del ssl cert /s/certs/b.example.test.pem']],
  ]);
});
