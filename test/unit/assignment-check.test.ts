import t from 'tap';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { AssignmentCheck, refusalOf } from '../../src/roles/agent/assignment-check.js';
import { sampleAssignment } from '../harness/assignment.js';

// An agent runs only what a declaration could have asked for, whoever wrote the assignment.

const assignment = sampleAssignment();

t.test('an assignment as the scheduler writes it is accepted', async (t) => {
  t.equal(refusalOf(assignment), undefined);
});

t.test('a field that asks for a privilege is refused by what it asks for', async (t) => {
  t.equal(refusalOf({ ...assignment, privileged: true }), 'assignment refused: it asks for privileged mode, which no declaration can');
  t.equal(refusalOf({ ...assignment, Binds: ['/:/host'] }), 'assignment refused: it asks for host paths, which no declaration can');
  t.equal(refusalOf({ ...assignment, pid_mode: 'host' }), "assignment refused: it asks for the host's PID namespace, which no declaration can");
  t.equal(refusalOf({ ...assignment, ipcMode: 'host' }), "assignment refused: it asks for the host's IPC namespace, which no declaration can");
  t.equal(refusalOf({ ...assignment, capAdd: ['SYS_ADMIN'], devices: ['/dev/kvm'] }), 'assignment refused: it asks for added capabilities and host devices, which no declaration can');
  t.equal(refusalOf({ ...assignment, healthCheck: { path: '/', privileged: true } }), 'assignment refused: it asks for privileged mode, which no declaration can', 'nested too');
});

t.test('any other field or a malformed one is refused with what is wrong', async (t) => {
  t.equal(refusalOf({ ...assignment, user: 'root' }), 'assignment refused: user is not a known field of assignment');
  t.equal(refusalOf({ ...assignment, ports: [{ container: 8080, hostIp: '0.0.0.0' }] }), 'assignment refused: ports.0.hostIp is not a known field of ports.0');
  t.match(refusalOf({ ...assignment, stopGraceSeconds: 'soon' }), /^assignment refused: stopGraceSeconds must /);
  t.equal(refusalOf({ ...assignment, env: { 'BAD NAME': 'x' } }), 'assignment refused: env.BAD NAME is not a known field of env');
  const { image: _image, ...imageless } = assignment;
  t.equal(refusalOf(imageless), 'assignment refused: image is required');
});

t.test('the check sorts records, keeps the slot of a refused one that names it, and logs each refusal once', async (t) => {
  let logText = '';
  const log = pino({ level: 'warn' }, new Writable({ write: (chunk, _encoding, done) => ((logText += String(chunk)), done()) })) as unknown as FastifyBaseLogger;
  const check = new AssignmentCheck(log);
  const records = [
    { key: 'a/ok', value: JSON.stringify(assignment) },
    { key: 'a/privileged', value: JSON.stringify({ ...assignment, unit: 'web-2.service', instance: 2, privileged: true }) },
    { key: 'a/garbage', value: '{not json' },
  ].map((record) => ({ ...record, modRevision: 1, createRevision: 1, version: 1 }));
  const first = check.check(records);
  t.same(first.accepted, [assignment]);
  t.same(
    first.refused.map(({ key, refusal, slot }) => ({ key, refusal, unit: slot?.unit })),
    [
      { key: 'a/privileged', refusal: 'assignment refused: it asks for privileged mode, which no declaration can', unit: 'web-2.service' },
      { key: 'a/garbage', refusal: 'assignment refused: it is not JSON', unit: undefined },
    ],
  );
  check.check(records);
  t.equal(logText.trim().split('\n').length, 2, 'two refusals, logged once each');
});

t.test('a host port the platform listens on is refused: a default one by the schema, this machine\'s by the check', async (t) => {
  const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
  const check = new AssignmentCheck(log, () => [9103]);
  const record = (key: string, host: number) => ({ key, value: JSON.stringify({ ...assignment, ports: [{ container: 80, host }] }), modRevision: 1, createRevision: 1, version: 1 });
  const { accepted, refused } = check.check([record('a/gateway', 8080), record('a/agent', 9103), record('a/free', 18080)]);
  t.same(accepted.map((a) => a.ports[0]!.host), [18080]);
  t.match(refused[0], { key: 'a/gateway', refusal: /^assignment refused: ports\.0\.host must be an integer from 1 to 65535 that is no platform port \(2379, / });
  t.same(refused[1], { key: 'a/agent', refusal: 'assignment refused: host port 9103 is one the platform listens on', slot: JSON.parse(record('a/agent', 9103).value) });
});
