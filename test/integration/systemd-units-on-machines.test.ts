import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPorts, type Role } from '../../src/config.js';
import { sidekickName, sidekickRoles, unitName } from '../../src/systemd/unit-files.js';
import { documentedBlock } from '../harness/documented-blocks.js';
import { startMachineNetwork } from '../harness/systemd-machines.js';
import { makeEtcdMemberCertificates } from '../harness/tls-certificates.js';
import { waitFor } from '../harness/wait.js';

// Issue 30 item 4: the README's install on a machine booted with systemd (docs/test-machines.md),
// one machine running every role: etcd over TLS configured with the README's /etc/default/etcd,
// the units `platform systemd render` writes, enabled as the README says. Regression tests of
// defects found that way: the README's etcd settings did not start etcd (3), the gateway
// restarted for ever (1), every API role did with --listen 0.0.0.0 (2), the roles' journal had
// lines that are not JSON and the sidekicks showed as disabled (5).

const network = await startMachineNetwork();
t.teardown(() => network.stop());
const machine = await network.boot();
const address = machine.address;
const certificateDir = mkdtempSync(join(tmpdir(), 'machine-etcd-certs-'));
t.teardown(() => rmSync(certificateDir, { recursive: true, force: true }));

const apiRoles: Role[] = ['directory', 'scheduler', 'orchestrator', 'web'];
const roles: Role[] = [...apiRoles, 'agent', 'gateway'];
const units = roles.map(unitName);
const etcdUrl = `https://${address}:2379`;
const tls = '--etcd-ca /etc/platform/etcd-ca.pem --etcd-cert /etc/platform/etcd-client.pem --etcd-key /etc/platform/etcd-client-key.pem';

/** The README's /etc/default/etcd for a cluster of one: m1 at the machine's address. */
function etcdSettingsForOneMember(readmeBlock: string): string {
  return readmeBlock
    .split('\n')
    .map((line) => (line.startsWith('ETCD_INITIAL_CLUSTER=') ? `ETCD_INITIAL_CLUSTER=m1=https://${address}:2380` : line.replaceAll('10.0.0.1', address)))
    .join('\n');
}

async function restartsOf(unit: string): Promise<number> {
  return Number((await machine.sh(`systemctl show -p NRestarts --value ${unit}`)).trim());
}

const journalOf = (unit: string): Promise<string> => machine.sh(`journalctl --no-pager -o cat _SYSTEMD_UNIT=${unit}`);

t.test('the README\'s /etc/default/etcd starts etcd (defect 3: inline comments became part of the values)', async (t) => {
  const certificates = makeEtcdMemberCertificates(certificateDir, address);
  const copy = (from: string, to: string) => machine.writeFile(to, readFileSync(from, 'utf8'));
  copy(certificates.ca, '/etc/etcd/ca.pem');
  copy(certificates.memberCert, '/etc/etcd/member.pem');
  copy(certificates.memberKey, '/etc/etcd/member-key.pem');
  copy(certificates.ca, '/etc/platform/etcd-ca.pem');
  copy(certificates.clientCert, '/etc/platform/etcd-client.pem');
  copy(certificates.clientKey, '/etc/platform/etcd-client-key.pem');
  await machine.sh('chown etcd:etcd /etc/etcd/*.pem && chmod 600 /etc/etcd/member-key.pem && chown root:platform /etc/platform/etcd-*.pem && chmod 640 /etc/platform/etcd-*.pem');
  const block = documentedBlock('ETCD_NAME=');
  t.comment(`the etcd settings of ${block.file}`);
  machine.writeFile('/etc/default/etcd', etcdSettingsForOneMember(block.text));
  const started = await machine.run(['systemctl', 'start', 'etcd'], { timeoutMs: 90_000 });
  const journal = started.status === 0 ? '' : await journalOf('etcd.service');
  t.equal(started.status, 0, `systemctl start etcd${journal ? `; its journal ends:\n${journal.split('\n').slice(-8).join('\n')}` : ''}`);
  const health = await machine.sh(`curl -sS --cacert /etc/platform/etcd-ca.pem --cert /etc/platform/etcd-client.pem --key /etc/platform/etcd-client-key.pem ${etcdUrl}/health`);
  t.match(JSON.parse(health), { health: 'true' }, 'it answers a client with the CA\'s certificate over TLS');
});

t.test('the units of every role, rendered to listen on every address and enabled as the README says', async (t) => {
  await machine.sh(`platform systemd render --roles ${roles.join(',')} --advertise ${address} --listen 0.0.0.0 --etcd ${etcdUrl} ${tls}`);
  const enabledAt = Date.now();
  await machine.sh(`systemctl daemon-reload && systemctl enable --now ${units.map((unit) => unit.replace(/\.service$/, '')).join(' ')}`, { timeoutMs: 120_000 });

  t.test('the gateway answers on port 80 and keeps running (defect 1: no netlink, os.networkInterfaces() failed)', async (t) => {
    const status = await waitFor(
      async () => (await fetch(`http://${address}/`, { headers: { host: `nothing.platform.local` }, signal: AbortSignal.timeout(2000) })).status,
      90_000,
      { intervalMs: 500, what: `the gateway at ${address}:80 (systemctl status gateway:\n${await machine.run(['systemctl', 'status', '--no-pager', '-n', '5', 'gateway']).then((r) => r.stdout)})` },
    );
    t.comment(`the gateway answered ${((Date.now() - enabledAt) / 1000).toFixed(1)} s after systemctl enable --now`);
    t.equal(status, 404, 'an unknown service: the gateway\'s own answer');
    t.equal(await restartsOf('gateway.service'), 0, 'never restarted');
  });

  t.test('every API role answers on the machine\'s address while listening on 0.0.0.0 (defect 2)', async (t) => {
    for (const role of apiRoles) {
      const url = `http://${address}:${defaultPorts[role]}/healthz`;
      const status = await waitFor(async () => (await fetch(url, { signal: AbortSignal.timeout(2000) })).status, 60_000, { intervalMs: 500, what: `${unitName(role)} at ${url}` });
      t.equal(status, 200, `${unitName(role)} answers`);
      t.equal(await restartsOf(unitName(role)), 0, `${unitName(role)} never restarted`);
    }
  });

  t.test('what the roles write to the journal is JSON, one object a line (defect 5)', async (t) => {
    for (const unit of [...units, ...sidekickRoles.map(sidekickName)]) {
      const lines = (await journalOf(unit)).split('\n').filter((line) => line.trim() !== '');
      t.ok(lines.length > 0, `${unit} logged`);
      const notJson = lines.filter((line) => {
        try {
          return typeof JSON.parse(line) !== 'object';
        } catch {
          return true;
        }
      });
      t.same(notJson, [], `${unit}: every line is JSON`);
    }
  });

  t.test('the sidekicks of the enabled roles show as enabled (defect 5)', async (t) => {
    for (const role of sidekickRoles) {
      const sidekick = sidekickName(role);
      const answer = await machine.run(['systemctl', 'is-enabled', sidekick]);
      t.equal(answer.stdout.trim(), 'enabled', `systemctl is-enabled ${sidekick}`);
      t.equal((await machine.run(['systemctl', 'is-active', sidekick])).stdout.trim(), 'active', `${sidekick} runs`);
    }
  });
});
