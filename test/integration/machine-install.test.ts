import t from 'tap';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { documentedBlock } from '../harness/documented-blocks.js';
import { debianPackage, restampedPackage } from '../harness/debian-package.js';
import { startLoad } from '../harness/http-load.js';
import { startRegistry } from '../harness/registry.js';
import { startMachineNetwork, type SystemdMachine } from '../harness/systemd-machines.js';
import { buildTestImage } from '../harness/test-image.js';
import { makeEtcdClusterCertificates } from '../harness/tls-certificates.js';
import { waitFor } from '../harness/wait.js';

// Issue 30 item 3: docs/install.md's machine install is a test. Three Debian 13 machines booted
// with systemd (docs/test-machines.md), bare of the platform: the Debian package installed with
// apt, then the doc's steps as printed (its etcd settings and its render command run with the
// example addresses 10.0.0.<i> swapped for the machines'), a three-member TLS etcd, every role
// enabled on every machine, the gateway included; then the specification's flow through them.

// Longer than the suite's 600 s per file: about 4 min on a quiet 2-core host but 9 to 11 under
// load, and a changed program builds its package first (50 s quiet, 7 min under load; cached by
// content after that).
t.setTimeout(25 * 60_000);

const network = await startMachineNetwork();
t.teardown(() => network.stop());
const registry = await startRegistry({ address: network.bridgeAddress });
t.teardown(() => registry.stop());
const deb = await debianPackage();
if (deb.builtSeconds !== undefined) t.comment(`the package built in ${deb.builtSeconds.toFixed(0)} s (cached for the next run)`);

const bareAt = Date.now();
// Side by side: each boot waits mostly on systemd and Docker inside, not on this machine's CPU.
const machines: SystemdMachine[] = await Promise.all([1, 2, 3].map(() => network.boot({ platform: 'none' })));
t.comment(`three bare machines booted in ${((Date.now() - bareAt) / 1000).toFixed(1)} s`);
const [m1] = machines as [SystemdMachine, ...SystemdMachine[]];
const seconds = (since: number): string => `${((Date.now() - since) / 1000).toFixed(1)} s`;

/** The doc's example addresses, 10.0.0.<i>, as the machines' own. */
const onTheseMachines = (text: string): string => text.replace(/\b10\.0\.0\.([1-3])\b/g, (_, i: string) => machines[Number(i) - 1]!.address);
/** A block the doc prints for m1 (10.0.0.1), as machine `i` (0-based) runs it: its own name and address, the cluster's list kept whole. */
function asMachine(i: number, block: string, clusterWide: (line: string) => boolean): string {
  return onTheseMachines(
    block
      .split('\n')
      .map((line) => (clusterWide(line) ? line : line.replaceAll('10.0.0.1', `10.0.0.${i + 1}`).replace(/=m1$/, `=m${i + 1}`)))
      .join('\n'),
  );
}

const certificateDir = mkdtempSync(join(tmpdir(), 'machine-install-certs-'));
t.teardown(() => rmSync(certificateDir, { recursive: true, force: true }));

const token = { secret: '' };
const api = async (method: string, url: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
  const response = await fetch(url, {
    method,
    headers: { authorization: `Bearer ${token.secret}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
};

t.test('step 1: apt install ./platform_<version>_amd64.deb on each bare machine, nothing fetched', async (t) => {
  const block = documentedBlock('apt install -y ./platform_');
  t.comment(`the packages of ${block.file}; the base has Docker, etcd, HAProxy and Debian's nodejs, so the machines need no mirror`);
  const script = block.text
    .split('\n')
    .filter((line) => !line.startsWith('apt-get install'))
    .join('\n')
    .replace(/\.\/platform_\S+_amd64\.deb/, `./${basename(deb.path)}`);
  const installs = machines.map((machine) => {
    copyFileSync(deb.path, join(machine.root, 'root', basename(deb.path)));
    return machine.run(['sh', '-ec', `cd /root\n${script}`], { timeoutMs: 180_000 });
  });
  for (const [machine, installing] of machines.map((machine, i) => [machine, installs[i]!] as const)) {
    const installed = await installing;
    t.equal(installed.status, 0, `${machine.name}: ${script}\n${installed.stdout.slice(-1500)}${installed.stderr.slice(-1500)}`);
    // apt 3 (Debian 13) says `Download size: 0 B / …`, apt 2 said `Need to get 0 B of …`.
    t.match(installed.stdout, /^(Need to get| *Download size:) 0 B\b/m, `${machine.name}: nothing to fetch`);
    t.notMatch(installed.stdout, /^Get:\d+ \w+:\/\//m, `${machine.name}: nothing fetched from a mirror`);
    t.match(await machine.sh('platform version --client'), new RegExp(`^platform ${deb.version.replaceAll('.', '\\.')}\\b`), `${machine.name}: /usr/bin/platform runs`);
    t.match(await machine.sh('id platform'), /\(platform\)/, `${machine.name}: the platform user`);
  }
});

t.test('steps 2 and 3: certificates, and the three-member TLS etcd of the doc\'s /etc/default/etcd', async (t) => {
  const certificates = makeEtcdClusterCertificates(
    certificateDir,
    machines.map((machine) => machine.address),
  );
  const block = documentedBlock('ETCD_NAME=');
  t.comment(`the etcd settings of ${block.file}`);
  machines.forEach((machine, i) => {
    const copy = (from: string, to: string): void => machine.writeFile(to, readFileSync(from, 'utf8'));
    copy(certificates.ca, '/etc/etcd/ca.pem');
    copy(certificates.members[i]!.cert, '/etc/etcd/member.pem');
    copy(certificates.members[i]!.key, '/etc/etcd/member-key.pem');
    copy(certificates.ca, '/etc/platform/etcd-ca.pem');
    copy(certificates.clientCert, '/etc/platform/etcd-client.pem');
    copy(certificates.clientKey, '/etc/platform/etcd-client-key.pem');
    machine.writeFile('/etc/default/etcd', asMachine(i, block.text, (line) => line.startsWith('ETCD_INITIAL_CLUSTER=')));
  });
  const priority = documentedBlock('mkdir -p /etc/systemd/system/etcd.service.d');
  for (const machine of machines) {
    const written = await machine.run(['sh', '-ec', priority.text], { timeoutMs: 30_000 });
    t.equal(written.status, 0, `${machine.name}: etcd's priority drop-in of ${priority.file}\n${written.stderr}`);
  }
  await Promise.all(
    machines.map((machine) =>
      machine.sh(
        'chown etcd:etcd /etc/etcd/*.pem && chmod 600 /etc/etcd/member-key.pem && chown root:platform /etc/platform/etcd-*.pem && chmod 640 /etc/platform/etcd-*.pem && systemctl enable --now etcd',
        { timeoutMs: 120_000 },
      ),
    ),
  );
  for (const machine of machines) {
    const health = await machine.sh(`curl -sS --cacert /etc/platform/etcd-ca.pem --cert /etc/platform/etcd-client.pem --key /etc/platform/etcd-client-key.pem https://${machine.address}:2379/health`);
    t.match(JSON.parse(health), { health: 'true' }, `${machine.name}'s member answers over TLS`);
    t.equal((await machine.sh('cut -d" " -f19 /proc/"$(systemctl show -P MainPID etcd)"/stat')).trim(), '-10', `${machine.name}'s member runs at nice -10`);
  }
});

const service = `shop-${randomBytes(2).toString('hex')}`;
const repository = `team/${service}`;

/** GET / of the service through the machine's gateway, by Host (fetch sends the URL's host whatever the headers say). */
async function throughGateway(machine: SystemdMachine): Promise<{ status: number; body: string }> {
  const response = await request(`http://${machine.address}/`, { headers: { host: `${service}.platform.local` }, headersTimeout: 2000, bodyTimeout: 2000 });
  return { status: response.statusCode, body: await response.body.text() };
}

t.test('step 4: the units rendered as the doc says, the test registry allowed (step 6), every role enabled', async (t) => {
  const block = documentedBlock('platform systemd render --roles');
  t.comment(`the render and enable commands of ${block.file}`);
  // Step 6's settings for a registry without TLS, written before the units start rather than with a restart after.
  const registrySettings = `PLATFORM_ALLOWED_REGISTRIES=${registry.host}\nPLATFORM_SCHEDULER_FLAGS="--insecure-registry ${registry.host}"\n`;
  for (const [i, machine] of machines.entries()) {
    const script = asMachine(i, block.text, (line) => line.includes('--etcd '));
    const rendered = await machine.run(['sh', '-ec', script.replace(/\nsystemctl daemon-reload[\s\S]*$/, '')], { timeoutMs: 60_000 });
    t.equal(rendered.status, 0, `${machine.name}: platform systemd render\n${rendered.stdout}${rendered.stderr}`);
    const settings = readFileSync(join(machine.root, 'etc/platform/platform.env'), 'utf8');
    t.match(settings, new RegExp(`^PLATFORM_ADVERTISE=${machine.address.replaceAll('.', '\\.')}$`, 'm'), `${machine.name}: platform.env has its address\n${rendered.stdout}`);
    machine.writeFile('/etc/platform/platform.env', settings + registrySettings, 0o600);
  }
  // One machine after the other, as an operator goes: ten Node processes starting at once on each
  // of three machines sharing two cores took minutes, each role's first etcd call timing out and
  // systemd restarting it (so starting it again) until the load passed.
  for (const [i, machine] of machines.entries()) {
    const enabledAt = Date.now();
    await machine.sh(asMachine(i, block.text, () => true).replace(/^[\s\S]*\n(systemctl daemon-reload)/, '$1'), { timeoutMs: 180_000 });
    await waitFor(async () => (await fetch(`http://${machine.address}:9003/healthz`, { signal: AbortSignal.timeout(2000) })).ok, 180_000, { intervalMs: 500, what: `${machine.name}'s agent` });
    t.comment(`${machine.name}: its roles enabled, its agent answering after ${seconds(enabledAt)}`);
  }
});

t.test('step 5 and the specification\'s flow: the first token, POST /services 201, POST /hooks/deploy 200, units spread, every gateway serving them', async (t) => {
  const orchestrator = `http://${m1.address}:9000`;
  await waitFor(async () => (await fetch(`${orchestrator}/readyz`, { signal: AbortSignal.timeout(2000) })).ok, 180_000, { intervalMs: 500, what: `the orchestrator at ${orchestrator}` }).catch(
    async (error: Error) => {
      const status = await m1.run(['sh', '-c', 'systemctl status --no-pager -n 0 orchestrator scheduler service-directory; journalctl --no-pager -n 30 -o cat -u orchestrator -u scheduler-announce']);
      // The steps after this one need a serving cluster.
      t.bailout(`${error.message}\n${status.stdout}${status.stderr}`);
    },
  );
  // In a unit of the machine, as from an operator's login session there: a command the harness runs
  // with nsenter stays in the test process's cgroup, outside the machine's cgroup namespace, and
  // the orchestrator (which tells the operator from a unit by the caller's cgroup) cannot see it,
  // so it took the caller for root of unknown origin and refused the bootstrap (403).
  token.secret = (await m1.sh(`systemd-run --quiet --pipe --wait --collect platform token bootstrap --orchestrator ${orchestrator}`)).trim();
  t.ok(token.secret.length > 20, 'platform token bootstrap printed a token');

  const image = await buildTestImage(m1.docker, registry.host, repository, 'v1');
  const created = await api('POST', `http://${m1.address}:9001/services`, { name: service, description: 'the machine install', containerImage: `${registry.host}/${repository}`, numInstances: 3, loadBalanced: true, publicFacing: true });
  t.equal(created.status, 201, JSON.stringify(created.body));

  const leader = await waitFor(
    async () => {
      for (const machine of machines) {
        // /healthz says whether it leads to any caller; /readyz, under --auth token, only to one with a token.
        const ready = await fetch(`http://${machine.address}:9002/healthz`, { signal: AbortSignal.timeout(2000) }).then((r) => r.json() as Promise<{ leader?: boolean }>);
        if (ready.leader) return machine;
      }
      return undefined;
    },
    60_000,
    { intervalMs: 500, what: 'a leading scheduler' },
  );
  const deploy = await api('POST', `http://${leader.address}:9002/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));

  const units = await waitFor(
    async () => {
      const listed = (await api('GET', `${orchestrator}/services/${service}/units`)).body as { unit: string; machine: string; active: string; sub: string }[];
      return listed.length === 3 && listed.every((unit) => unit.active === 'active' && unit.sub === 'running') ? listed : undefined;
    },
    120_000,
    { intervalMs: 500, what: `3 running units of ${service}` },
  );
  t.same(units.map((unit) => unit.unit).sort(), [1, 2, 3].map((n) => `${service}-${n}.service`), 'units <name>-<n>.service');
  t.equal(new Set(units.map((unit) => unit.machine)).size, 3, `spread over the three machines: ${units.map((unit) => `${unit.unit} on ${unit.machine}`).join(', ')}`);

  for (const machine of machines) {
    const page = await waitFor(
      async () => {
        const response = await throughGateway(machine);
        return response.status === 200 ? response.body : undefined;
      },
      60_000,
      { intervalMs: 250, what: `${service} through ${machine.name}'s gateway` },
    );
    t.match(page, new RegExp(`^${service}-\\d\\.service`), `${machine.name}'s gateway serves ${service} by Host`);
  }
  t.comment(`bare machines → the first deploy answered through every gateway: ${seconds(bareAt)} (the package build excluded)`);
});

interface PlacedUnit {
  unit: string;
  machine: string;
  active: string;
  sub: string;
}
/** The name the agent registers its machine under: the machine id (/etc/machine-id), not the host name. */
const machineIdOf = (machine: SystemdMachine): string => readFileSync(join(machine.root, 'etc/machine-id'), 'utf8').trim();
/** The service's units as m1's orchestrator lists them; an answer other than 200 throws, naming it. */
const unitsOf = async (name: string): Promise<PlacedUnit[]> => {
  const answer = await api('GET', `http://${m1.address}:9000/services/${name}/units`);
  if (answer.status !== 200) throw new Error(`GET /services/${name}/units answered ${answer.status}: ${JSON.stringify(answer.body).slice(0, 200)}`);
  return answer.body as PlacedUnit[];
};
const running = (units: PlacedUnit[]): PlacedUnit[] => units.filter((unit) => unit.active === 'active' && unit.sub === 'running');
/** The machine's containers of the service: id and when it (re)started, which a restart changes. */
const containersOn = async (machine: SystemdMachine): Promise<string[]> =>
  Promise.all(
    (await machine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).map(async (listed) => {
      const inspected = await machine.docker.getContainer(listed.Id).inspect();
      return `${inspected.Name} ${listed.Id.slice(0, 12)} started ${inspected.State.StartedAt} restarts ${inspected.RestartCount}`;
    }),
  ).then((lines) => lines.sort());
const serves = async (machine: SystemdMachine): Promise<boolean> =>
  (await throughGateway(machine)).status === 200;

/** `/platform/services/<component>` as etcd has it, read over TLS from m1 (etcd's JSON gateway). */
async function announced(component: string): Promise<string | null> {
  const key = Buffer.from(`/platform/services/${component}`).toString('base64');
  const answer = await m1.sh(
    `curl -sS --cacert /etc/platform/etcd-ca.pem --cert /etc/platform/etcd-client.pem --key /etc/platform/etcd-client-key.pem -X POST https://${m1.address}:2379/v3/kv/range -d '{"key":"${key}"}'`,
  );
  const value = (JSON.parse(answer) as { kvs?: { value: string }[] }).kvs?.[0]?.value;
  return value === undefined ? null : Buffer.from(value, 'base64').toString();
}

t.test('a stopped component: its announcement gone within the TTL, another machine\'s takes over', async (t) => {
  const before = await waitFor(() => announced('service-directory'), 30_000, { what: 'the service directory\'s announcement' });
  const holder = machines.find((machine) => before.startsWith(`${machine.address}:`))!;
  t.ok(holder, `announced: ${before}`);
  const stoppedAt = Date.now();
  await holder.sh('systemctl stop service-directory');
  const after = await waitFor(
    async () => {
      const now = await announced('service-directory');
      return now !== null && now !== before ? now : undefined;
    },
    10_000,
    { intervalMs: 200, what: `another machine's service directory announced instead of ${before}` },
  );
  t.comment(`${holder.name}'s service-directory stopped → ${after} announced after ${seconds(stoppedAt)} (TTL 10 s)`);
  t.not(after.split(':')[0], holder.address, 'another machine');
  await holder.sh('systemctl start service-directory');
});

t.test('systemctl restart agent keeps the machine\'s units: the same containers, none restarted', async (t) => {
  const machine = machines[1]!;
  const before = await containersOn(machine);
  t.equal(before.length, 1, `${machine.name} runs one unit of ${service}`);
  const restartedAt = Date.now();
  await machine.sh('systemctl restart agent');
  await waitFor(async () => (await fetch(`http://${machine.address}:9003/readyz`, { signal: AbortSignal.timeout(2000) })).ok, 60_000, { intervalMs: 250, what: `${machine.name}'s agent ready` });
  t.comment(`${machine.name}'s agent ready again ${seconds(restartedAt)} after systemctl restart agent`);
  // Long enough for an agent that would replace or stop units to have done so.
  await new Promise((resolve) => setTimeout(resolve, 5000));
  t.same(await containersOn(machine), before, 'the same container, never restarted');
  t.equal(running(await unitsOf(service)).length, 3, 'three units running');
  t.ok(await serves(machine), 'its gateway serves the service');
});

t.test('a reboot of one machine keeps its units on it, serving again', async (t) => {
  const machine = machines[2]!;
  const placed = (await unitsOf(service)).filter((unit) => unit.machine === machineIdOf(machine)).map((unit) => unit.unit);
  t.equal(placed.length, 1, `${machine.name} has a unit: ${JSON.stringify(await unitsOf(service))}`);
  const rebootAt = Date.now();
  await machine.reboot();
  t.comment(`${machine.name} booted again in ${seconds(rebootAt)}`);
  await waitFor(async () => (await serves(machine)) && running(await unitsOf(service)).length === 3, 120_000, { intervalMs: 500, what: `${service} running at 3 and served by ${machine.name} after its reboot` });
  t.comment(`reboot of ${machine.name} → its gateway serving ${service} again, three units running: ${seconds(rebootAt)}`);
  const after = (await unitsOf(service)).filter((unit) => unit.machine === machineIdOf(machine)).map((unit) => unit.unit);
  t.same(after, placed, 'the same unit on the same machine');
});

t.test('a reboot of all three brings the service back at its count, spread, within 60 s of the machines being up', async (t) => {
  const rebootAt = Date.now();
  await Promise.all(machines.map((machine) => machine.reboot()));
  const bootedAt = Date.now();
  t.comment(`the three machines booted again in ${seconds(rebootAt)}`);
  // Each change of what the test sees, with its time since the reboot: where the time goes.
  const timeline: string[] = [];
  const see = (state: string): void => {
    if (timeline.at(-1)?.endsWith(` ${state}`) !== true) timeline.push(`${seconds(rebootAt)} ${state}`);
  };
  const back = await waitFor(
    async () => {
      const placed = await unitsOf(service).then(running, (error: Error) => error);
      if (placed instanceof Error) {
        see(`the orchestrator on ${m1.name}: ${placed.message.slice(0, 80)}`);
        return false;
      }
      const serving = await Promise.all(machines.map((machine) => serves(machine).catch(() => false)));
      see(`${placed.length} units running on ${new Set(placed.map((unit) => unit.machine)).size} machines; gateways serving: ${serving.filter(Boolean).length}`);
      return placed.length === 3 && new Set(placed.map((unit) => unit.machine)).size === 3 && serving.every(Boolean);
    },
    // 60 s from the machines being up: how long their boots take is this host's (33 s beside a CI
    // run and a benchmark, 17 to 24 s quiet), not the platform's; the figure from the reboot itself
    // is printed below and docs/install.md gives it for a quiet host.
    60_000,
    { intervalMs: 500, what: `${service} at 3 units over 3 machines, served by every gateway, within 60 s of the machines being up again` },
  ).catch((error: Error) => error);
  t.comment(`what the test saw after the reboot of all:\n${timeline.join('\n')}`);
  if (Date.now() - bootedAt > 30_000) {
    // Slow: what m1's etcd member and orchestrator did since its boot says where the time went.
    const journal = await m1.run(['journalctl', '-b', '--no-pager', '-o', 'short-monotonic', '-u', 'etcd', '-u', 'orchestrator', '-u', 'service-directory']);
    t.comment(`${m1.name}'s etcd, orchestrator and service directory since the boot:\n${journal.stdout.split('\n').slice(-80).join('\n')}`);
  }
  t.equal(back, true, String(back));
  t.comment(`reboot of all → ${service} served again by every gateway: ${seconds(rebootAt)} (${seconds(bootedAt)} after the machines were up)`);
});

t.test('an upgrade to a newer package, one machine after the other, under load drops no request', async (t) => {
  const newer = await restampedPackage(deb, '0.2.1');
  if (newer.builtSeconds !== undefined) t.comment(`the 0.2.1 package (the same files, restamped) made in ${newer.builtSeconds.toFixed(0)} s`);
  const loads = machines.map((machine) => startLoad({ url: `http://${machine.address}/`, host: `${service}.platform.local`, concurrency: 2, maxDurationMs: 600_000 }));
  const upgradeAt = Date.now();
  for (const machine of machines) {
    copyFileSync(newer.path, join(machine.root, 'root', basename(newer.path)));
    const upgraded = await machine.run(['sh', '-ec', `cd /root && apt install -y ./${basename(newer.path)}`], { timeoutMs: 300_000 });
    t.equal(upgraded.status, 0, `${machine.name}: apt install ./${basename(newer.path)}\n${upgraded.stdout.slice(-1500)}${upgraded.stderr.slice(-1500)}`);
    t.match(await machine.sh('platform version --client'), /^platform 0\.2\.1\b/, `${machine.name} runs 0.2.1`);
  }
  t.comment(`three machines upgraded in ${seconds(upgradeAt)}`);
  const results = await Promise.all(loads.map((load) => load.stop()));
  for (const [i, result] of results.entries()) {
    t.ok(result.ok > 0, `${machines[i]!.name}'s gateway answered ${result.ok} requests`);
    t.equal(result.failed, 0, `${machines[i]!.name}: no request failed (${result.failed} of ${result.ok + result.failed} did; the first reasons: ${result.failures.join('; ')})`);
    if (result.failed > 0) {
      // What the gateway did while requests failed: its restart, HAProxy adopted or started afresh.
      const journal = await machines[i]!.run(['journalctl', '--no-pager', '-o', 'short-precise', '-u', 'gateway', '--since', `@${Math.floor(upgradeAt / 1000)}`]);
      t.comment(`${machines[i]!.name}'s gateway during the upgrade:\n${journal.stdout.slice(-6000)}`);
    }
  }
  t.equal(running(await unitsOf(service)).length, 3, 'three units running');
});
