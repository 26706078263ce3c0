import t from 'tap';
import type { Assignment } from '../../src/schemas/cluster.js';
import { containerCreateOptions } from '../../src/roles/agent/container-spec.js';

// Every unit's container is confined the same way, whatever its assignment and network mode.

const assignment: Assignment = {
  unit: 'web-1.service',
  service: 'web',
  instance: 1,
  machine: 'm1',
  release: 3,
  spec: '3f2a9c01de',
  image: 'registry.example/web@sha256:' + 'a'.repeat(64),
  ports: [],
  env: {},
  stopGraceSeconds: 10,
  deployment: 'd1',
  assignedAt: '2026-01-01T00:00:00.000Z',
};

t.test('every unit container is unprivileged, cannot gain privileges, and keeps only ordinary capabilities', async (t) => {
  for (const network of ['host', 'bridge'] as const) {
    const { HostConfig: host } = containerCreateOptions({ assignment, machineId: 'm1', network, port: 8080 });
    t.equal(host?.Privileged, false, network);
    t.same(host?.SecurityOpt, ['no-new-privileges']);
    t.same(host?.CapDrop, ['ALL']);
    t.notOk(host?.CapAdd?.some((cap: string) => ['SYS_ADMIN', 'NET_RAW', 'MKNOD', 'SYS_PTRACE', 'NET_ADMIN'].includes(cap)));
    t.equal(host?.IpcMode, 'private');
    t.equal(host?.PidMode, undefined, 'its own PID namespace');
    t.equal(host?.Binds, undefined);
    t.equal(host?.Mounts, undefined);
    t.equal(host?.Devices, undefined);
  }
});
