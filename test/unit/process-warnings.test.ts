import t from 'tap';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { logProcessWarnings } from '../../src/logger.js';

// Issue 30, defect 5: a role's process warnings are entries of its JSON log, not the plain-text
// lines Node prints to stderr (which broke the JSON of its journal); the TLS-to-an-IP deprecation
// of the etcd client's gRPC library is logged at debug, every other warning at warn.

const entries: Record<string, unknown>[] = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString().split('\n').filter(Boolean)) entries.push(JSON.parse(line) as Record<string, unknown>);
    done();
  },
});
const warningListeners = process.listeners('warning');
t.teardown(() => {
  process.removeAllListeners('warning');
  for (const listener of warningListeners) process.on('warning', listener);
});

t.test('warnings become log entries; Node prints none to stderr', async (t) => {
  const stderr: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => (stderr.push(String(chunk)), true)) as typeof process.stderr.write;
  t.teardown(() => void (process.stderr.write = write));
  logProcessWarnings(pino({ level: 'debug' }, sink));
  process.emitWarning('watch on /platform/units/ ended: gone', 'StoreWatchWarning');
  process.emitWarning('Setting the TLS ServerName to an IP address is not permitted by RFC 6066.', 'DeprecationWarning', 'DEP0123');
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  t.match(entries, [
    { level: 40, msg: 'watch on /platform/units/ ended: gone', warning: { name: 'StoreWatchWarning' } },
    { level: 20, msg: /TLS ServerName/, warning: { name: 'DeprecationWarning', code: 'DEP0123' } },
  ]);
  t.same(stderr, [], 'nothing on stderr');
});
