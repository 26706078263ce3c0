import t from 'tap';
import { connect } from 'node:net';
import { Agent, request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { pick, seededRandom } from '../harness/random.js';
import { generateRequest, operationsOf, rawRequest, type FuzzRequest, type Operation } from '../harness/fuzz-requests.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { journalPrefix, serviceKey } from '../../src/store/keys.js';
import { proxiedPaths } from '../../src/roles/web/orchestrator-proxy.js';

// Hostile input over every route of every role (issue 14): at least 10,000 generated requests,
// taken from each role's served OpenAPI document, with malformed, poisoned, huge and deeply nested
// bodies, wrong types, bad parameters, tokens and headers, with and without a valid token, plus
// request heads no client library would send. Every role runs under --auth token on a real etcd
// (and a real Docker engine for the agent). Then: no answer is 5xx, none hangs, every process
// still answers, and the store holds exactly what a known set of valid requests, sent among the
// others, made. FUZZ_SEED=<n> replays a run; FUZZ_REQUESTS=<n> changes its size.

const seed = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const TOTAL = Number(process.env.FUZZ_REQUESTS ?? 10_000);
const VALID = 12;
const CONCURRENCY = 16;
/** A request not answered within this counts as a hang. */
const REQUEST_TIMEOUT_MS = 20_000;
t.comment(`fuzz seed ${seed}: FUZZ_SEED=${seed} replays this run`);

const engine = await startDockerd();
const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token', '--headers-timeout', '5', '--body-timeout', '5'];
// One after another: six processes starting at once on two busy cores can miss etcd's deadlines.
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'fuzz'], { DOCKER_HOST: engine.dockerHost });
const gateway = await serveRole('gateway', await freePort(), flags);
const web = await serveRole('web', await freePort(), flags);
const roles = { directory, scheduler, orchestrator, agent, gateway, web };
type RoleName = keyof typeof roles;
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await store.close();
  await Promise.all(Object.values(roles).map((role) => role.stop()));
  await Promise.all([etcd.stop(), engine.stop()]);
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const bootstrap = await http('POST', `${roles.orchestrator.url}/tokens/bootstrap`);
const admin = bootstrap.body.secret as string;
const readToken = await http('POST', `${roles.orchestrator.url}/tokens`, { name: 'fuzz-read', role: 'read' }, bearer(admin));
const read = readToken.body.secret as string;
const known = await http('POST', `${roles.directory.url}/services`, { name: 'fuzz-known', containerImage: 'registry.example/fuzz-known:1' }, bearer(admin));
// Both tokens have been used, so their last-use keys exist before the fuzz starts.
await http('GET', `${roles.directory.url}/services`, undefined, bearer(read));

/** Keys and values under /platform/. */
const storeContents = async (): Promise<Map<string, string>> => new Map((await store.list('/platform/')).map((entry) => [entry.key, entry.value]));

interface Target {
  role: RoleName;
  operation: Operation;
}

/** Every route of every role, from the OpenAPI document it serves; the web role also passes the orchestrator's on. */
async function targets(): Promise<Target[]> {
  const found: Target[] = [];
  const documents: Partial<Record<RoleName, Operation[]>> = {};
  for (const role of Object.keys(roles) as RoleName[]) {
    const document = await http('GET', `${roles[role].url}/documentation/json`);
    if (document.status !== 200) throw new Error(`${role} serves no OpenAPI document: ${document.status}`);
    documents[role] = operationsOf(document.body);
    for (const operation of documents[role]!) found.push({ role, operation });
  }
  const proxied = (path: string) => proxiedPaths.some((pattern) => (pattern.endsWith('/*') ? path.startsWith(pattern.slice(0, -1)) : path === pattern));
  for (const operation of documents.orchestrator!) if (proxied(operation.path)) found.push({ role: 'web', operation });
  return found;
}

/**
 * Loopback addresses for requests without a valid token: each address may fail 20 times a minute
 * before it is refused. Calls with a valid token come from another one, never refused: 127.0.0.1
 * is where the roles' own calls to each other come from, and a role counts the failures of the
 * callers it passes a credential on for against its own address (src/auth/failure-limiter.ts).
 */
const CREDENTIALED_ADDRESS = '127.0.0.2';
const failingAddresses = Array.from({ length: 250 }, (_, i) => `127.0.1.${i + 1}`);
const dispatchers = new Map<string, Agent>();
const dispatcherFor = (address: string): Agent => {
  let dispatcher = dispatchers.get(address);
  if (!dispatcher) {
    dispatcher = new Agent({ localAddress: address, connections: 8, keepAliveTimeout: 2_000 });
    dispatchers.set(address, dispatcher);
  }
  return dispatcher;
};
t.teardown(() => Promise.all([...dispatchers.values()].map((dispatcher) => dispatcher.close())));

interface Planned {
  index: number;
  role: RoleName;
  address: string;
  /** A request through undici, or bytes written as they are. */
  request?: FuzzRequest;
  raw?: { text: string; kind: string };
  /** `<role> <METHOD> <path>` of the operation the request was generated for. */
  route?: string;
  /** One of the known valid requests: `fuzz-valid-<n>` is declared. */
  valid?: string;
}

interface Outcome {
  status?: number;
  error?: string;
  excerpt: string;
  ms: number;
}

const routeName = ({ role, operation }: Target): string => `${role} ${operation.method} ${operation.path}`;

function plan(all: Target[]): Planned[] {
  const rnd = seededRandom(seed);
  const planned: Planned[] = [];
  for (let index = 0; index < TOTAL; index++) {
    const { role, operation } = pick(rnd, all);
    const address = pick(rnd, failingAddresses);
    if (rnd() < 0.04) {
      planned.push({ index, role, address, raw: rawRequest(rnd, `127.0.0.1:${new URL(roles[role].url).port}`, admin) });
      continue;
    }
    const generated = generateRequest(rnd, operation, { admin, read });
    const credentialed = generated.kind.startsWith('admin token') || generated.kind.startsWith('read token');
    planned.push({ index, role, address: credentialed ? CREDENTIALED_ADDRESS : address, request: generated, route: routeName({ role, operation }) });
  }
  // The known valid requests, among the others.
  for (let n = 0; n < VALID; n++) {
    const at = Math.floor(rnd() * planned.length);
    planned.splice(at, 0, { index: -1, role: 'directory', address: CREDENTIALED_ADDRESS, valid: `fuzz-valid-${n}` });
  }
  return planned.map((entry, index) => ({ ...entry, index }));
}

async function sendRequest(role: RoleName, address: string, fuzz: FuzzRequest): Promise<Outcome> {
  const started = Date.now();
  try {
    const reply = await request(`${roles[role].url}${fuzz.path}`, {
      method: fuzz.method as 'GET',
      headers: fuzz.headers,
      ...(fuzz.body === undefined ? {} : { body: fuzz.body }),
      dispatcher: dispatcherFor(address),
      headersTimeout: REQUEST_TIMEOUT_MS,
      bodyTimeout: REQUEST_TIMEOUT_MS,
    });
    // Event streams and followed log tails stay open by design: their head is the answer.
    const streaming = String(reply.headers['content-type'] ?? '').includes('event-stream') || (reply.statusCode === 200 && fuzz.path.includes('follow=true'));
    let excerpt = '';
    if (streaming) reply.body.destroy();
    else excerpt = (await reply.body.text()).slice(0, 300);
    return { status: reply.statusCode, excerpt, ms: Date.now() - started };
  } catch (error) {
    return { error: `${(error as Error).name}: ${(error as Error).message}`, excerpt: '', ms: Date.now() - started };
  }
}

function sendRaw(role: RoleName, address: string, text: string): Promise<Outcome> {
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port: Number(new URL(roles[role].url).port), localAddress: address });
    let received = '';
    const finish = (error?: string) => {
      clearTimeout(timer);
      socket.destroy();
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(received);
      resolve({ ...(match ? { status: Number(match[1]) } : { error: error ?? `closed without an answer` }), excerpt: received.slice(0, 300), ms: Date.now() - started });
    };
    const timer = setTimeout(() => finish(`no answer within ${REQUEST_TIMEOUT_MS} ms`), REQUEST_TIMEOUT_MS);
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      received += chunk;
      // One answer is enough: its head and, if it says how long, its body.
      const [head, body = ''] = received.split('\r\n\r\n');
      const length = /\r\ncontent-length: *(\d+)/i.exec(head ?? '');
      if (received.includes('\r\n\r\n') && (!length || body.length >= Number(length[1]))) finish();
    });
    socket.on('error', (error) => finish(error.message));
    socket.on('close', () => finish());
    socket.write(text, 'latin1');
  });
}

function sendPlanned(entry: Planned): Promise<Outcome> {
  if (entry.raw) return sendRaw(entry.role, entry.address, entry.raw.text);
  if (entry.valid) {
    return sendRequest('directory', entry.address, {
      method: 'POST',
      path: '/services',
      headers: { ...bearer(admin), 'content-type': 'application/json' },
      body: JSON.stringify({ name: entry.valid, containerImage: `registry.example/${entry.valid}:1` }),
      kind: 'valid',
    });
  }
  return sendRequest(entry.role, entry.address, entry.request!);
}

const describe = (entry: Planned, outcome: Outcome): string => {
  const what = entry.raw
    ? `raw (${entry.raw.kind}): ${JSON.stringify(entry.raw.text.slice(0, 200))}`
    : entry.valid
      ? `valid POST /services ${entry.valid}`
      : `${entry.request!.method} ${entry.request!.path.slice(0, 200)} [${entry.request!.kind}] headers ${JSON.stringify(entry.request!.headers).slice(0, 300)} body ${JSON.stringify(String(entry.request!.body ?? '').slice(0, 200))}`;
  const result = outcome.error ? `failed: ${outcome.error}` : `answered ${outcome.status} after ${outcome.ms} ms: ${outcome.excerpt.slice(0, 200)}`;
  return `seed ${seed} #${entry.index} from ${entry.address} to ${entry.role}: ${what} → ${result}`;
};

t.test(`${TOTAL} hostile requests over every route of every role: no 5xx, no hang, every role still answers, the store holds only what the valid ones made`, async (t) => {
  t.equal(bootstrap.status, 201);
  t.equal(readToken.status, 201);
  t.equal(known.status, 201);
  const all = await targets();
  const routesOf = (role: RoleName) => new Set(all.filter((target) => target.role === role).map((target) => `${target.operation.method} ${target.operation.path}`));
  for (const role of Object.keys(roles) as RoleName[]) t.ok(routesOf(role).size > 0, `${role}: ${routesOf(role).size} routes`);
  const before = await storeContents();

  const planned = plan(all);
  const perRoute = new Map(all.map((target) => [routeName(target), 0]));
  for (const entry of planned) if (entry.route) perRoute.set(entry.route, perRoute.get(entry.route)! + 1);
  const scarce = [...perRoute].filter(([, count]) => count < 20);
  t.same(scarce, [], `each of the ${perRoute.size} routes gets at least 20 requests`);
  const outcomes: Outcome[] = new Array(planned.length);
  let next = 0;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < planned.length) {
        const entry = planned[next++]!;
        outcomes[entry.index] = await sendPlanned(entry);
      }
    }),
  );
  t.comment(`${planned.length} requests in ${Date.now() - started} ms`);

  const statuses = new Map<string, number>();
  for (const outcome of outcomes) {
    const key = outcome.error ? 'no answer' : String(outcome.status);
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
  }
  t.comment(`answers: ${[...statuses].sort().map(([status, count]) => `${status}×${count}`).join(', ')}`);

  const failures = planned.filter((entry) => {
    const outcome = outcomes[entry.index]!;
    return outcome.error !== undefined || outcome.status! >= 500;
  });
  t.same(failures.slice(0, 25).map((entry) => describe(entry, outcomes[entry.index]!)), [], `no 5xx and no hang (${failures.length} failed)`);
  const validFailures = planned.filter((entry) => entry.valid && outcomes[entry.index]!.status !== 201);
  t.same(validFailures.map((entry) => describe(entry, outcomes[entry.index]!)), [], 'every known valid request succeeded');

  for (const [role, process] of Object.entries(roles)) {
    t.equal(process.child.exitCode, null, `${role} is still running`);
    t.equal((await http('GET', `${process.url}/healthz`)).status, 200, `${role} still answers /healthz`);
  }

  const after = await storeContents();
  const validNames = planned.flatMap((entry) => (entry.valid ? [entry.valid] : []));
  const added = [...after.keys()].filter((key) => !before.has(key));
  const removed = [...before.keys()].filter((key) => !after.has(key));
  t.same(removed, [], 'nothing was deleted');
  t.same(added.filter((key) => !key.startsWith(journalPrefix)).sort(), validNames.map(serviceKey).sort(), 'the only new records are the valid requests\' services');
  const journaled = added.filter((key) => key.startsWith(journalPrefix)).map((key) => after.get(key)!);
  t.equal(journaled.length, validNames.length, 'one journal entry per valid request');
  t.ok(journaled.every((entry) => validNames.some((name) => entry.includes(name))), 'each names a service a valid request declared');
  // Records the fuzz had no right to touch are as they were (last-use times and leased statuses move by themselves).
  const steady = (key: string) => !/^\/platform\/(token-use|services|machines|unit-status|scheduler)\//.test(key);
  const changed = [...before.keys()].filter((key) => steady(key) && after.has(key) && after.get(key) !== before.get(key));
  t.same(changed, [], 'no record was changed');
});
