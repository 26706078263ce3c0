import t from 'tap';
import type { PlannedRoute } from '../../src/roles/gateway/route-plan.js';
import { haproxyConfig, hostsMapFile, noUnitBody, poolBackendOf, routeLabel, routesMapFile, slotName, slotsFor, threadCommands, threadShare, unitsMapFile, type HaproxyConfigInput } from '../../src/roles/gateway/haproxy-config.js';
import { backendConfigs, emptyState, MIN_SPARE_BACKENDS, reassignsBackend, reloaded, routedBackends, transition, type HaproxyState } from '../../src/roles/gateway/haproxy-slots.js';
import { renderError } from '../../src/roles/gateway/gateway-error.js';
import { parseStat, refusals } from '../../src/roles/gateway/haproxy-runtime.js';
import { certificateChanges, crtListFile, pemBundle, PLACEHOLDER_NAME, type CertificatePaths } from '../../src/roles/gateway/haproxy-certificates.js';

// The HAProxy data plane's pure parts: the configuration it writes, and the Runtime API commands
// that take HAProxy from one route plan to the next (checked against a model of what HAProxy does
// with them, over random sequences of plans).

const files = { runtimeSocket: '/s/runtime.sock', pidFile: '/s/haproxy.pid', hostsMap: '/s/hosts.map', unitsMap: '/s/units.map', routesMap: '/s/routes.map', lua: '/s/c.lua' };
const targets = { ...files, upstreamConnections: 128 };
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

const backendOf = (state: HaproxyState, planned: PlannedRoute): string | undefined => routedBackends(state).get(routeLabel(planned))?.name;

const configFor = (state: HaproxyState): string => {
  const input: HaproxyConfigInput = { listeners: [{ host: '127.0.0.1', port: 8080, name: 'public' }], internalDomain: 'platform.internal', ownPort: 4000, settings, files, backends: backendConfigs(state) };
  return haproxyConfig(input);
};

t.test('the configuration has a pool of backends: the routes in the routes map, units in the ready slots, spares to take', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80', '10.0.0.2:80']), route('orchestrator', ['127.0.0.1:9000'], 'component')]);
  const config = configFor(state);
  t.match(config, /^ {2}nbthread 2$/m);
  t.match(config, /^ {2}bind 127\.0\.0\.1:8080 name public proto h1$/m);
  t.notMatch(config, /public_listener/, 'a lone (loopback) listener serves both domains');
  t.match(config, /^ {2}stats socket \/s\/runtime\.sock mode 600 level admin expose-fd listeners$/m);
  t.equal(config.match(/^backend b_\d+\.0$/gm)!.length, 2 + MIN_SPARE_BACKENDS, 'two backends serve routes, the rest are spares');
  t.equal(config.match(/^backend b_\d+\.1$/gm)!.length, 2 + MIN_SPARE_BACKENDS, 'each has a copy per thread');
  t.match(config, /^ {2}use_backend %\[var\(txn\.backend\)\]\.%\[thread\] if routed$/m, 'a thread routes to its own copy');
  t.notMatch(config, /web|orchestrator/, 'no route is named in the configuration');
  t.equal(config.match(/^ {2}server b_1-1 10\.0\.0\.1:80 maxconn 64$/gm)!.length, 2, 'in each copy, with the thread\'s share of the unit\'s connections');
  t.match(config, /^ {2}server b_1-2 10\.0\.0\.2:80 maxconn 64$/m);
  t.match(config, /^ {2}server b_1-3 127\.0\.0\.1:1 disabled maxconn 64$/m, 'free slots are disabled');
  t.equal(config.match(/^ {2}server b_1-/gm)!.length, 2 * slotsFor(2));
  t.equal(config.match(/^ {2}server b_18-/gm)!.length, 2 * slotsFor(0), 'a spare has its slots ready to take units');
  t.match(config, /^ {2}balance leastconn$/m);
  t.match(config, /^ {2}retry-on conn-failure empty-response$/m);
  t.match(config, /^ {2}server own 127\.0\.0\.1:4000$/m, 'unrouted requests reach the Node server');
  t.match(config, /map_str\(\/s\/hosts\.map\)/);
  t.match(config, /http-error status 502 .*%\[srv_name,map_str\(\/s\/units\.map\)\] of %\[be_name,field\(1,\.\),map_str\(\/s\/routes\.map\),field\(2,:\)\] could not be reached/);
  t.equal(hostsMapFile(state.hosts), 'web.platform.internal b_1\norchestrator.platform.internal b_2\n');
  t.match(routesMapFile(backendConfigs(state)), /^b_1 service:web\nb_2 component:orchestrator\nb_3 -\n/);
  t.match(unitsMapFile(backendConfigs(state)), /^b_1-1 web-1\.service\nb_1-2 web-2\.service\nb_1-3 -\n/);
});

t.test('per-request rules scan the headers once where one scan does: the X-Forwarded-For count, the hop-by-hop headers each way', async (t) => {
  const config = configFor(reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]));
  t.equal(config.match(/req\.fhdr_cnt\(x-forwarded-for\)/g)?.length, 1, 'the count is taken once, into a variable');
  t.match(config, /^ {2}http-request set-var\(txn\.xff_count\) req\.fhdr_cnt\(x-forwarded-for\) if routed \|\| !loopback$/m);
  t.match(config, /^ {2}http-request del-header \^\(proxy-authorization\|proxy-connection\|te\|trailer\|keep-alive\|forwarded\|x-real-ip\)\$ -m reg if routed$/m);
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
  t.match(config, /^ {2}server b_1-1 ipv6@fd00::1:80 maxconn 64$/m);
});

/** What HAProxy makes of a double-quoted lf-string, with the routes map saying `kind:name`. */
const haproxyRenders = (lfString: string, kind: string, name: string): string =>
  lfString
    .replace(/%\[be_name,field\(1,\.\),map_str\(\/s\/routes\.map\),field\(1,:\)\]/g, kind)
    .replace(/%\[be_name,field\(1,\.\),map_str\(\/s\/routes\.map\),field\(2,:\)\]/g, name)
    .replace(/\\n/g, '\n')
    .replace(/\\(.)/g, '$1')
    .replace(/%%/g, '%');

t.test('the 503 answers are the Node data plane’s bodies byte for byte, the route read from the routes map', async (t) => {
  const json = noUnitBody(files, false);
  t.equal(haproxyRenders(json, 'service', 'web'), renderError({ status: 503, message: 'service web has no healthy unit', retryAfter: 2 }, false).body);
  t.equal(haproxyRenders(json, 'component', 'orchestrator'), '{"statusCode":503,"error":"Service Unavailable","message":"component orchestrator has no healthy unit"}\n');
  t.equal(haproxyRenders(noUnitBody(files, true), 'service', 'error-pages'), renderError({ status: 503, message: 'service error-pages has no healthy unit', retryAfter: 2 }, true).body);
  t.notMatch(configFor(reloaded(emptyState(), [])), / file /, 'no per-route error file');
});

t.test('a unit joining, draining and coming back is three runtime commands each, no reload', async (t) => {
  let state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  const joined = transition(state, [route('web', ['10.0.0.1:80', '10.0.0.2:80'])], targets);
  t.notOk(joined.reload);
  t.same(joined.commands, ['set server b_1/b_1-2 addr 10.0.0.2 port 80', 'set map /s/units.map b_1-2 web-2.service', 'set server b_1/b_1-2 state ready']);
  state = joined.next;
  const drained = transition(state, [route('web', ['10.0.0.2:80'])].map((r) => ({ ...r, targets: [{ address: '10.0.0.2:80', unit: 'web-2.service' }] })), targets);
  t.same(drained.commands, ['set server b_1/b_1-1 state drain']);
  const back = transition(drained.next, [route('web', ['10.0.0.1:80', '10.0.0.2:80'])], targets);
  t.same(back.commands, ['set server b_1/b_1-1 state ready'], 'a draining unit that is routable again is readied in its slot');
});

t.test('a command on a pool backend\'s server goes to every thread\'s copy of it; map commands go once', async (t) => {
  const commands = ['set server b_1/b_1-2 addr 10.0.0.2 port 80', 'set map /s/units.map b_1-2 web-2.service', 'set server b_1/b_1-2 state drain', 'add server b_12/b_12-5 10.0.0.5:80 maxconn 64', 'enable server b_12/b_12-5', 'add map /s/hosts.map web.platform.internal b_1'];
  t.same(threadCommands(commands, 2), [
    'set server b_1.0/b_1-2 addr 10.0.0.2 port 80',
    'set server b_1.1/b_1-2 addr 10.0.0.2 port 80',
    'set map /s/units.map b_1-2 web-2.service',
    'set server b_1.0/b_1-2 state drain',
    'set server b_1.1/b_1-2 state drain',
    'add server b_12.0/b_12-5 10.0.0.5:80 maxconn 64',
    'add server b_12.1/b_12-5 10.0.0.5:80 maxconn 64',
    'enable server b_12.0/b_12-5',
    'enable server b_12.1/b_12-5',
    'add map /s/hosts.map web.platform.internal b_1',
  ]);
  t.same(threadCommands(commands, 1).filter((command) => command.includes(' server ')), commands.filter((command) => command.includes(' server ')).map((command) => command.replace(/(b_\d+)\//, '$1.0/')));
  t.equal(poolBackendOf('b_12.1'), 'b_12');
  t.equal(poolBackendOf('own'), 'own');
  t.same([threadShare(128, 2), threadShare(128, 3), threadShare(1, 4)], [64, 42, 1], 'the copies together stay within the cap, and each takes at least one');
});

t.test('a new service takes a spare backend through the routes map, no reload; its hosts are mapped once it has units', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  const step = transition(state, [route('web', ['10.0.0.1:80']), route('api', ['10.0.0.9:80'])], targets);
  t.notOk(step.reload);
  t.same(step.commands, [
    'set map /s/routes.map b_2 service:api',
    'set server b_2/b_2-1 addr 10.0.0.9 port 80',
    'set map /s/units.map b_2-1 api-1.service',
    'set server b_2/b_2-1 state ready',
    'add map /s/hosts.map api.platform.internal b_2',
  ]);
  t.same(transition(state, [route('web', ['10.0.0.1:80']), route('idle', [])], targets).commands, [], 'a service without units takes no backend yet');
});

t.test('more units than slots grow the backend by dynamic servers, no reload; a reload keeps them as slots', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  const five = ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80', '10.0.0.4:80', '[fd00::5]:80'];
  const step = transition(state, [route('web', five)], targets);
  t.notOk(step.reload);
  t.same(step.commands.slice(-3), ['add server b_1/b_1-5 ipv6@fd00::5:80 maxconn 128', 'add map /s/units.map b_1-5 web-5.service', 'enable server b_1/b_1-5'], 'added, named in the units map, then enabled');
  t.equal(step.next.backends.get('b_1')!.slots.length, 5);
  const many = Array.from({ length: 12 }, (_, i) => `10.0.1.${i}:80`);
  const grown = transition(step.next, [route('web', many)], targets);
  t.equal(grown.next.backends.get('b_1')!.slots.length, 5 + 12, 'draining slots are left to drain while the backend is smaller than a reload would make it');
  t.equal(reloaded(grown.next, [route('web', many)]).backends.get('b_1')!.slots.length, slotsFor(12), 'a reload writes the dynamic servers in');
});

t.test('a deleted service’s backend returns to the pool; only a dry pool needs a reload, which refills it', async (t) => {
  const web = route('web', ['10.0.0.1:80']);
  let state = reloaded(emptyState(), [web]);
  const gone = transition(state, [], targets);
  t.same(gone.commands, ['del map /s/hosts.map web.platform.internal', 'set server b_1/b_1-1 state drain'], 'its hosts leave before its backend can be taken');
  state = gone.next;
  t.equal(backendOf(state, web), undefined);
  const others = Array.from({ length: MIN_SPARE_BACKENDS + 1 }, (_, i) => route(`s${i}`, [`10.0.2.${i}:80`]));
  const full = transition(state, others, targets);
  t.notOk(full.reload, 'fresh spares and the released backend make room for as many new services');
  t.equal(backendOf(full.next, others.at(-1)!), 'b_1', 'the released backend is taken last');
  t.ok(full.commands.includes(`set map /s/routes.map b_1 service:s${MIN_SPARE_BACKENDS}`));
  t.ok(reassignsBackend(state, full.next), "the released backend goes to another route: its counts so far are web's, read first");
  t.notOk(reassignsBackend(reloaded(emptyState(), [web]), gone.next), 'a backend released is not reassigned yet');
  t.notOk(reassignsBackend(gone.next, transition(gone.next, others.slice(0, 3), targets).next), 'fresh spares taken: no counts to read first');
  const again = transition(state, [web], targets);
  t.same(again.commands, ['set server b_1/b_1-1 state ready', 'add map /s/hosts.map web.platform.internal b_1'], 'a service back finds its backend and its draining unit');
  const dry = transition(full.next, [...others, route('one-more', ['10.0.3.1:80'])], targets);
  t.ok(dry.reload, 'no spare left');
  const refilled = reloaded(dry.next, [...others, route('one-more', ['10.0.3.1:80'])]);
  const spares = [...refilled.backends.values()].filter((backend) => backend.route === undefined).length;
  t.equal(spares, others.length + 1, 'as many spares as routes served');
});

t.test('a host whose backend has no unit is left to the Node server (it answers 503 as it would alone)', async (t) => {
  const state = reloaded(emptyState(), [route('web', ['10.0.0.1:80'])]);
  t.same([...state.hosts], [['web.platform.internal', 'b_1']]);
  const emptied = transition(state, [route('web', [])], targets);
  t.same(emptied.commands, ['del map /s/hosts.map web.platform.internal', 'set server b_1/b_1-1 state drain']);
});

t.test('a Runtime API answer naming a service called error-pages is not a refusal; a real refusal is', async (t) => {
  const commands = ['set map /s/routes.map b_2 service:error-pages', 'set map /s/units.map b_2-1 error-pages-1.service'];
  t.same(refusals(commands, "\nentry 'b_2' -> 'service:error-pages' updated\n\n"), []);
  t.same(refusals(['set server b_1/b_1-1 addr 10.0.0.9 port 80'], "IP changed from '127.0.0.1' to '10.0.0.9', port changed from '1' to '80' by 'stats socket command'\n"), []);
  t.same(refusals(commands, 'Unknown map identifier. Please use #<id> or <file>.\n'), ['Unknown map identifier. Please use #<id> or <file>.']);
  t.same(refusals(['set server b_9/b_9-1 state ready'], 'No such server.\n'), ['No such server.']);
});

t.test('certificate commands: the files they name, in the command or its crt-list payload, are not read as refusals', async (t) => {
  const file = '/state/certs/error-pages.example.com.pem';
  const add = `add ssl crt-list /state/certs.list <<\n${file} error-pages.example.com\n`;
  t.same(refusals([add], `Inserting certificate '${file}' in crt-list '/state/certs.list'.\nSuccess!\n`), []);
  t.same(refusals([`new ssl cert ${file}`], `New empty certificate store '${file}'!\n`), []);
  t.same(refusals([`set ssl cert ${file} <<\n-----BEGIN CERTIFICATE-----\nfailed\n`], `Transaction created for certificate ${file}!\n`), []);
  t.same(refusals([`new ssl cert ${file}`], `Certificate '${file}' already exists!\n`), [`Certificate '${file}' already exists!`]);
  t.same(refusals([`del ssl cert ${file}`], "Can't remove the certificate: certificate is in use.\n"), ["Can't remove the certificate: certificate is in use."]);
});

/** What HAProxy does with the commands: servers by name, and the maps. */
interface Model {
  servers: Map<string, { address: string; state: string }>;
  hosts: Map<string, string>;
  routes: Map<string, string>;
  units: Map<string, string>;
}

function modelOf(state: HaproxyState): Model {
  const servers = new Map<string, { address: string; state: string }>();
  const units = new Map<string, string>();
  for (const backend of backendConfigs(state)) {
    backend.slots.forEach((slot, index) => {
      servers.set(`${backend.name}/${slotName(backend.name, index)}`, { address: slot.address ?? '127.0.0.1:1', state: slot.address ? 'ready' : 'maint' });
      units.set(slotName(backend.name, index), slot.unit ?? '-');
    });
  }
  return { servers, hosts: new Map(state.hosts), routes: new Map(backendConfigs(state).map((backend) => [backend.name, backend.label])), units };
}

function setMap(map: Map<string, string>, key: string, value: string, add: boolean, command: string): void {
  if (map.has(key) === add) throw new Error(`${add ? 'add' : 'set'} map of ${add ? 'an existing' : 'a missing'} key: ${command}`);
  map.set(key, value);
}

function run(model: Model, command: string): void {
  let match: RegExpExecArray | null;
  const maps: Record<string, Map<string, string>> = { hosts: model.hosts, routes: model.routes, units: model.units };
  if ((match = /^set server (\S+) addr (\S+) port (\d+)$/.exec(command))) model.servers.get(match[1]!)!.address = `${match[2]}:${match[3]}`;
  else if ((match = /^set server (\S+) state (\S+)$/.exec(command))) model.servers.get(match[1]!)!.state = match[2]!;
  else if ((match = /^add server (\S+) (\S+) maxconn 128$/.exec(command))) {
    if (model.servers.has(match[1]!)) throw new Error(`add server of an existing server: ${command}`);
    model.servers.set(match[1]!, { address: match[2]!, state: 'maint' });
  } else if ((match = /^enable server (\S+)$/.exec(command))) model.servers.get(match[1]!)!.state = 'ready';
  else if ((match = /^(add|set) map \/s\/(hosts|routes|units)\.map (\S+) (\S+)$/.exec(command))) setMap(maps[match[2]!]!, match[3]!, match[4]!, match[1] === 'add', command);
  else if ((match = /^del map \/s\/hosts\.map (\S+)$/.exec(command))) model.hosts.delete(match[1]!);
  else throw new Error(`unexpected command ${command}`);
}

/** Whether HAProxy, as modelled, routes exactly as the plan says, and the pool's other backends take no request. */
function matches(model: Model, plan: readonly PlannedRoute[]): string | undefined {
  const serving = new Set<string>();
  for (const planned of plan) {
    const wanted = planned.targets.map((target) => target.address).sort();
    const mapped = new Set(planned.hosts.map((host) => model.hosts.get(host)));
    if (mapped.size !== 1) return `${planned.name}: hosts lead to ${[...mapped].join(' ')}`;
    const [name] = mapped;
    if (wanted.length === 0) {
      if (name !== undefined) return `${planned.name} has no unit but maps to ${name}`;
      continue;
    }
    if (name === undefined) return `${planned.name} is not mapped`;
    if (model.routes.get(name) !== routeLabel(planned)) return `${name} serves ${planned.name} but the routes map says ${model.routes.get(name)}`;
    serving.add(name);
    const ready = [...model.servers].filter(([server, s]) => server.startsWith(`${name}/`) && s.state === 'ready');
    if (JSON.stringify(ready.map(([, s]) => s.address).sort()) !== JSON.stringify(wanted)) return `${planned.name}: ready ${ready.map(([, s]) => s.address).join(' ')}, planned ${wanted.join(' ')}`;
    for (const [server, s] of ready) {
      const unit = planned.targets.find((target) => target.address === s.address)!.unit;
      if (model.units.get(server.split('/')[1]!) !== unit) return `${server} is named ${model.units.get(server.split('/')[1]!)}, not ${unit}`;
    }
  }
  for (const [server, s] of model.servers) if (s.state === 'ready' && !serving.has(server.split('/')[0]!)) return `${server} takes requests outside the plan`;
  const hosts = new Set(plan.flatMap((planned) => planned.hosts));
  for (const host of model.hosts.keys()) if (!hosts.has(host)) return `${host} is still mapped`;
  return undefined;
}

t.test('over random plans, the commands (and reloads) leave HAProxy routing exactly as planned, and no host astray meanwhile', async (t) => {
  let seed = 7;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const reloads: number[] = [];
  let commands = 0;
  // Few services, then as many as the pool holds and more: backends taken, released and taken again.
  for (const names of [['a', 'b', 'c'], Array.from({ length: 40 }, (_, i) => `n${i}`)]) {
    reloads.push(0);
    for (let run_ = 0; run_ < 10; run_++) {
      // As HAProxy starts: the configuration written for no route yet.
      let state = reloaded(emptyState(), []);
      let model = modelOf(state);
      for (let step = 0; step < 100; step++) {
        const plan = names.filter(() => random(5) > 0).map((name) => route(name, [...new Set(Array.from({ length: random(12) }, () => `10.0.${random(3)}.${random(9)}:80`))]));
        const next = transition(state, plan, targets);
        for (const command of next.commands) {
          run(model, command);
          if (!/^(add|set) map /.test(command)) continue;
          // Between any two commands (HAProxy routes requests meanwhile) a host leads only to its own route's backend.
          const astray = [...model.hosts].find(([host, backend]) => model.routes.get(backend) !== `service:${host.split('.')[0]}`);
          if (astray) return t.fail(`${names.length} names, run ${run_}, step ${step}, after ${command}: ${astray[0]} leads to ${astray[1]}, which serves ${model.routes.get(astray[1])}`);
        }
        commands += next.commands.length;
        state = next.next;
        if (next.reload) {
          reloads[reloads.length - 1]! += 1;
          state = reloaded(state, plan);
          model = modelOf(state);
        }
        const wrong = matches(model, plan);
        if (wrong !== undefined) return t.fail(`${names.length} names, run ${run_}, step ${step}: ${wrong}`);
      }
    }
  }
  t.pass(`2000 plans applied: ${commands} commands, reloads ${reloads.join(' and ')}`);
  t.equal(reloads[0], 0, 'three services and their units never need a reload');
  t.ok(reloads[1]! <= 2 * 10, 'with up to 40 services, at most two reloads a run: the pool refills as large as the routes served');
});

t.test('show stat is read by its CSV header', async (t) => {
  const rows = parseStat('# pxname,svname,scur,status\nb_1,b_1-1,3,UP\nb_1,BACKEND,3,UP\n');
  t.same(rows, [
    { pxname: 'b_1', svname: 'b_1-1', scur: '3', status: 'UP' },
    { pxname: 'b_1', svname: 'BACKEND', scur: '3', status: 'UP' },
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

t.test('a held route\'s hosts go to the Node server (which holds its requests); its slots stay, so requests in flight finish; lifting the hold maps them again', async (t) => {
  const state = reloaded(emptyState(), [route('db', ['10.0.0.1:80'])]);
  const held = transition(state, [{ ...route('db', ['10.0.0.1:80']), heldUntil: Date.now() + 30_000 }], targets);
  t.same(held.commands, ['del map /s/hosts.map db.platform.internal']);
  t.same([...held.next.hosts], []);
  t.same(reloaded(state, [{ ...route('db', ['10.0.0.1:80']), heldUntil: Date.now() + 30_000 }]).hosts.size, 0, 'a reload while held maps no host either');
  const handedOver = transition(held.next, [route('db', ['10.0.0.2:80'])], targets);
  t.same(handedOver.commands, [
    'set server b_1/b_1-1 state drain',
    'set server b_1/b_1-2 addr 10.0.0.2 port 80',
    'set map /s/units.map b_1-2 db-1.service',
    'set server b_1/b_1-2 state ready',
    'add map /s/hosts.map db.platform.internal b_1',
  ]);
});
