import type { Assignment } from '../../src/schemas/cluster.js';

/** An assignment as the scheduler writes it, for tests of what the agent makes of one. */
export const sampleAssignment = (overrides: Partial<Assignment> = {}): Assignment => ({
  unit: 'web-1.service',
  service: 'web',
  instance: 1,
  machine: 'm1',
  release: 3,
  spec: '3f2a9c01de',
  image: 'registry.example/web@sha256:' + 'a'.repeat(64),
  ports: [{ container: 8080 }],
  env: { GREETING: 'hello' },
  stopGraceSeconds: 10,
  healthCheck: { path: '/healthz' },
  deployment: 'd1',
  assignedAt: '2026-01-01T00:00:00.000Z',
  ...overrides,
});
