import t from 'tap';
import { containerCreateOptions } from '../../src/roles/agent/container-spec.js';
import { sampleAssignment } from '../harness/assignment.js';

// Every unit's container is confined the same way, whatever its assignment and network mode.

const assignment = sampleAssignment();

t.test('every unit container is unprivileged, cannot gain privileges, and keeps only ordinary capabilities', async (t) => {
  for (const network of ['host', 'bridge'] as const) {
    const { HostConfig: host } = containerCreateOptions({ assignment, machineId: 'm1', network, port: 8080 });
    t.equal(host?.Privileged, false, network);
    t.same(host?.SecurityOpt, ['no-new-privileges']);
    t.same(host?.CapDrop, ['ALL']);
    t.notOk(host?.CapAdd?.some((cap: string) => ['SYS_ADMIN', 'NET_RAW', 'MKNOD', 'SYS_PTRACE', 'NET_ADMIN'].includes(cap)));
    t.equal(host?.IpcMode, 'private');
    t.equal(host?.PidMode, undefined, 'its own PID namespace');
    t.equal(host?.PidsLimit, 1024, 'at most 1024 processes');
    t.equal(host?.Binds, undefined);
    t.equal(host?.Mounts, undefined);
    t.equal(host?.Devices, undefined);
  }
});

t.test('a unit runs as the user it is given (host networking: not root), and as the image says otherwise', async (t) => {
  t.equal(containerCreateOptions({ assignment, machineId: 'm1', network: 'host', port: 30000, user: '65534:65534' }).User, '65534:65534');
  t.equal(containerCreateOptions({ assignment, machineId: 'm1', network: 'bridge', port: 8080 }).User, undefined);
});

t.test('a unit declared without memory gets the agent’s default limit; a declared one keeps its own (L5)', async (t) => {
  const MIB = 1024 * 1024;
  const undeclared = containerCreateOptions({ assignment, machineId: 'm1', network: 'bridge', port: 8080, defaultMemoryMB: 1024 }).HostConfig;
  t.equal(undeclared?.Memory, 1024 * MIB);
  t.equal(undeclared?.MemorySwap, 1024 * MIB, 'no swap beyond it');
  const declared = { ...assignment, resources: { memoryMB: 64 } };
  t.equal(containerCreateOptions({ assignment: declared, machineId: 'm1', network: 'bridge', port: 8080, defaultMemoryMB: 1024 }).HostConfig?.Memory, 64 * MIB);
  t.equal(containerCreateOptions({ assignment, machineId: 'm1', network: 'bridge', port: 8080 }).HostConfig?.Memory, undefined, 'no default: no limit');
});
