import t from 'tap';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startDockerd } from '../harness/docker.js';
import { freePort } from '../harness/free-port.js';
import { http, runCli, runPlatform, waitHealthy, type PlatformProcess } from '../harness/platform.js';
import { importRootfs } from '../harness/rootfs.js';
import { startTestHosts } from '../harness/test-hosts.js';
import { waitFor } from '../harness/wait.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { issueToken } from '../../src/auth/tokens.js';

// Who is a local caller, on real parts: etcd, the roles as `platform serve` processes, a test
// host (a network namespace on a test bridge) as another machine, a real container on host
// networking as a unit (it shares this machine's loopback, and runs as root in its container),
// and a process of another uid as a local process that is not the operator's.
//   M5: a unit is never a local caller: no tokenless call, no bootstrap, no secret-less webhook.
//   M4: bootstrap only from this machine; under --auth auto the operator is told at start how to make the first token.
//   M3: one local process's bad tokens lock out neither the operator's CLI nor a remote dashboard admin.
//   L2: webhook secrets have a minimum length and wrong guesses are limited.

const hosts = await startTestHosts({ count: 1, agents: 0 });
const remote = hosts.hosts[0]!;
const engine = await startDockerd({});
const processes: PlatformProcess[] = [];
t.teardown(async () => {
  await Promise.all(processes.map((started) => started.stop()));
  await store.close();
  await engine.stop();
  await hosts.stop();
});

const UNIT_IMAGE = 'local-callers-unit:v1';
await importRootfs(engine.docker, { applets: ['sh', 'wget'] }, { repo: 'local-callers-unit', tag: 'v1', changes: [] });

const flags = [...hosts.flags, '--announce-ttl', '3'];

/** `platform serve --role <role>` on `host`; the bridge address is this machine's address on the test host's network. */
async function serve(role: string, host: string, extra: string[], env: NodeJS.ProcessEnv = {}): Promise<{ url: string; bridgeUrl: string; started: PlatformProcess }> {
  const port = await freePort();
  // Advertised on loopback: the roles reach each other over it, as they do on one machine.
  const started = runPlatform(['serve', '--role', role, '--host', host, '--port', String(port), '--advertise', `127.0.0.1:${port}`, ...flags, ...extra], env);
  processes.push(started);
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, started);
  return { url, bridgeUrl: `http://${hosts.bridgeAddress}:${port}`, started };
}

// The roles under --auth token, on every address: the test host reaches them on the bridge.
const directory = await serve('directory', '0.0.0.0', ['--auth', 'token']);
const orchestrator = await serve('orchestrator', '0.0.0.0', ['--auth', 'token']);
const web = await serve('web', '0.0.0.0', ['--auth', 'token']);
// A secret-less scheduler on loopback, and an orchestrator under auto on loopback (not announced: the other one is).
const scheduler = await serve('scheduler', '127.0.0.1', ['--auth', 'token']);
const autoOrchestrator = await serve('orchestrator', '127.0.0.1', ['--auth', 'auto', '--no-announce']);

const store = new EtcdStore(hosts.flags[1]!.split(','));

/** The secret of a new admin token, written to the store as `platform token create` would; returned once the roles know it. */
async function issuedSecret(name: string): Promise<string> {
  const issued = await issueToken(store, { name, role: 'admin' });
  if (!issued) throw new Error(`token ${name} exists already`);
  const authorization = `Bearer ${issued.secret}`;
  const known = async (url: string) => (await http('GET', url, undefined, { authorization })).status === 200 || undefined;
  await waitFor(async () => (await known(`${directory.url}/services`)) && known(`${orchestrator.url}/services`), 5000, { what: `token ${name} known to the roles` });
  return issued.secret;
}

interface Reply {
  status: number;
  body: string;
}

const run = (command: string, args: string[]): Promise<string> =>
  new Promise((resolve, reject) => {
    execFile(command, args, { timeout: 60_000 }, (error, stdout, stderr) => (error ? reject(new Error(`${command} ${args.join(' ')}: ${stderr || error.message}`)) : resolve(stdout)));
  });

/** curl with the given prefix command (nsenter, setpriv): the status and the body. */
async function curl(prefix: string[], method: string, url: string, headers: Record<string, string> = {}, body?: string): Promise<Reply> {
  const args = ['curl', '-s', '-X', method, '-w', '\n%{http_code}', ...Object.entries(headers).flatMap(([name, value]) => ['-H', `${name}: ${value}`])];
  if (body !== undefined) args.push('-H', 'content-type: application/json', '--data', body);
  const out = await run(prefix[0]!, [...prefix.slice(1), ...args, url]);
  const cut = out.lastIndexOf('\n');
  return { status: Number(out.slice(cut + 1)), body: out.slice(0, cut) };
}

/** From the test host: another machine. */
const fromRemote = (method: string, url: string, headers: Record<string, string> = {}, body?: string) =>
  curl(['nsenter', `--net=/var/run/netns/${remote.name}`], method, url, headers, body);

/** From a local process of another user than the operator (nobody). */
const NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'];

/**
 * A unit on host networking: a container of this machine's Docker engine, root inside, that
 * calls `url` over loopback with busybox wget; the status it got (wget -S prints the response head).
 */
async function fromUnit(url: string, options: { post?: string; headers?: Record<string, string> } = {}): Promise<number> {
  const args = ['wget', '-S', '-O', '-', ...Object.entries(options.headers ?? {}).map(([name, value]) => `--header=${name}: ${value}`)];
  if (options.post !== undefined) args.push(`--post-data=${options.post}`);
  const container = await engine.docker.createContainer({ Image: UNIT_IMAGE, Cmd: [...args, url], Tty: true, HostConfig: { NetworkMode: 'host' } });
  try {
    await container.start();
    await container.wait();
    const output = (await container.logs({ stdout: true, stderr: true })).toString();
    const status = /HTTP\/1\.1 (\d{3})/.exec(output)?.[1];
    if (status === undefined) throw new Error(`the unit got no HTTP answer: ${output}`);
    return Number(status);
  } finally {
    await container.remove({ force: true });
  }
}

const json = { 'content-type': 'application/json' };

t.test('M5: under --auth auto a unit on host networking is no local caller; the operator still calls without a token', async (t) => {
  t.equal(await fromUnit(`${autoOrchestrator.url}/tokens/bootstrap`, { post: '{}', headers: json }), 403, 'the unit mints no admin token');
  t.equal(await fromUnit(`${autoOrchestrator.url}/tokens`, { post: '{"name":"unit-made","role":"admin"}', headers: json }), 401, 'nor any other');
  t.equal(await fromUnit(`${autoOrchestrator.url}/tokens`), 401, 'the unit reads nothing without a token');
  const operator = await http('GET', `${autoOrchestrator.url}/tokens`);
  t.equal(operator.status, 200, 'the operator’s tokenless loopback request keeps working');
  t.same(operator.body, [], 'no token was made');
});

t.test('M4: under --auth auto the orchestrator says at start that no token exists and how to make one', async (t) => {
  t.match(autoOrchestrator.started.output(), /no API token exists yet.*platform token bootstrap/);
});

t.test('M4: bootstrap from another machine is 403 naming the way; nothing is issued; on the machine it works', async (t) => {
  const refused = await fromRemote('POST', `${orchestrator.bridgeUrl}/tokens/bootstrap`);
  t.equal(refused.status, 403, refused.body);
  t.match(JSON.parse(refused.body), { statusCode: 403, message: /only from this machine.*platform token bootstrap/ });
  const unit = await fromUnit(`${orchestrator.url}/tokens/bootstrap`, { post: '{}', headers: json });
  t.equal(unit, 403, 'nor from a unit under --auth token');
  const cli = await runCli(orchestrator.url, ['token', 'bootstrap'], { PLATFORM_TOKEN: '' });
  t.equal(cli.code, 0, cli.stderr);
  t.match(cli.stdout.trim(), /^plt_[A-Za-z0-9_-]{43}$/);
});

t.test('M5: under --auth token a unit cannot use a secret-less webhook; the operator on the machine can', async (t) => {
  const envelope = JSON.stringify({ events: [] });
  const headers = { 'content-type': 'application/vnd.docker.distribution.events.v1+json' };
  t.equal(await fromUnit(`${scheduler.url}/hooks/registry`, { post: envelope, headers }), 403);
  t.equal(await fromUnit(`${scheduler.url}/hooks/dockerhub`, { post: '{}', headers: { 'content-type': 'application/json' } }), 403);
  const operator = await http('POST', `${scheduler.url}/hooks/registry`, envelope, headers);
  t.equal(operator.status, 200, JSON.stringify(operator.body));
});

t.test('M3: a local process guessing tokens (forging X-Forwarded-For too) locks out neither the CLI nor a remote dashboard admin', async (t) => {
  // A token of its own, so that this test does not depend on the bootstrap above.
  const admin = await issuedSecret('m3-admin');
  // As itself at the directory and the orchestrator, then posing as the remote admin's address.
  const guessers: [string, string][] = [
    [directory.url, ''],
    [orchestrator.url, ''],
    [orchestrator.url, `-H 'x-forwarded-for: ${remote.address}'`],
  ];
  for (const [target, forged] of guessers) {
    const script = `for i in $(seq 1 21); do ${NOBODY.join(' ')} curl -s -o /dev/null -w '%{http_code} ' -H "authorization: Bearer plt_guess-$i" ${forged} ${target}/services; done`;
    const guesses = await run('sh', ['-c', script]);
    t.equal(guesses.trim().split(' ').pop(), '429', `the guessing process itself is limited at ${target}: ${guesses}`);
  }
  const cli = await runCli(orchestrator.url, ['services'], { PLATFORM_TOKEN: admin });
  t.equal(cli.code, 0, `the operator's CLI is not locked out: ${cli.stderr}`);
  t.equal((await http('GET', `${directory.url}/services`, undefined, { authorization: `Bearer ${admin}` })).status, 200);
  const dashboard = await fromRemote('GET', `${web.bridgeUrl}/services`, { authorization: `Bearer ${admin}` });
  t.equal(dashboard.status, 200, `the remote dashboard admin is not locked out: ${dashboard.body}`);
});

t.test('M3: a remote client guessing through the web role is limited by its own address, and only it', async (t) => {
  const admin = await issuedSecret('m3-local-admin');
  let last: Reply | undefined;
  for (let i = 1; i <= 21; i++) last = await fromRemote('GET', `${web.bridgeUrl}/services`, { authorization: `Bearer plt_remote-${i}` });
  t.equal(last!.status, 429, last!.body);
  t.match(JSON.parse(last!.body).message, new RegExp(`too many failed authentications from ${remote.address.replace(/\./g, '\\.')}:`));
  t.equal((await http('GET', `${web.url}/services`, undefined, { authorization: `Bearer ${admin}` })).status, 200, 'a local dashboard user is not');
});

t.test('L2: a webhook secret shorter than 24 characters is refused at start, naming the setting', async (t) => {
  const port = await freePort();
  const short = runPlatform(['serve', '--role', 'scheduler', '--port', String(port), '--no-announce', ...flags], { PLATFORM_REGISTRY_WEBHOOK_TOKEN: 'short-secret' });
  processes.push(short);
  const exited = new Promise<string>((resolve) => short.child.once('exit', (code) => resolve(`exited with ${code}`)));
  const outcome = await Promise.race([exited, waitHealthy(`http://127.0.0.1:${port}`, short).then(() => 'answering', () => exited)]);
  t.match(outcome, /^exited with [1-9]/);
  t.match(short.output(), /PLATFORM_REGISTRY_WEBHOOK_TOKEN \(or --registry-webhook-token\) must be at least 24 characters/);
});

t.test('L2: wrong webhook secrets are limited like tokens: the 21st guess is 429, even with the right secret', async (t) => {
  const secret = randomBytes(16).toString('hex');
  const hooked = await serve('scheduler', '127.0.0.1', ['--auth', 'token', '--no-announce'], { PLATFORM_DOCKERHUB_WEBHOOK_TOKEN: secret });
  const statuses: number[] = [];
  for (let i = 1; i <= 20; i++) statuses.push((await http('POST', `${hooked.url}/hooks/dockerhub?token=guess-${i}`, {})).status);
  t.same([...new Set(statuses)], [401]);
  const limited = await http('POST', `${hooked.url}/hooks/dockerhub?token=${secret}`, {});
  t.equal(limited.status, 429, JSON.stringify(limited.body));
  t.match(limited.headers.get('retry-after'), /^\d+$/);
  t.equal((await http('POST', `${scheduler.url}/hooks/registry`, JSON.stringify({ events: [] }), { 'content-type': 'application/vnd.docker.distribution.events.v1+json' })).status, 200, 'another process keeps its own count');
});
