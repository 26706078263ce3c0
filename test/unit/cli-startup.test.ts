import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { loadedPackages, packageHook as hook } from '../harness/package-hook.js';

// A client command loads only the client (issue 31: `platform services` spent about 0.9 s of CPU
// loading the servers' dependencies). A resolve hook lists every package the command loads
// (test/harness/package-hook.ts); the servers' ones must not be among them. CPU time itself is
// measured in bench/, not here.

const cli = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

// The servers' packages, and undici: the client speaks HTTP through node:http (src/http/json-request.ts).
const UNNEEDED_PACKAGES = ['fastify', 'etcd3', 'prom-client', 'pino', 'dockerode', '@sinclair/typebox', 'ajv', 'acme-client', '@fastify/swagger', 'undici'];

t.test('platform services loads no server package, nor undici', async (t) => {
  const orchestrator = createServer((_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end('[]')).listen(0, '127.0.0.1');
  await once(orchestrator, 'listening');
  t.teardown(() => orchestrator.close());
  const url = `http://127.0.0.1:${(orchestrator.address() as AddressInfo).port}`;
  const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
    execFile(process.execPath, ['--import', hook, cli, '--orchestrator', url, 'services'], (error, stdout, stderr) => (error ? reject(error) : resolve({ stdout, stderr }))),
  );
  t.match(stdout, /^NAME\s+IMAGE/, 'the command ran');
  const loaded = loadedPackages(stderr);
  t.ok(loaded.includes('commander'), 'the hook saw the packages loaded');
  t.same(loaded.filter((name) => UNNEEDED_PACKAGES.includes(name!)), [], `loaded: ${loaded.join(', ')}`);
});

// The other way round (issue 29, idle memory): a serving process runs for days, and what only the
// client commands use (their live cluster view's event-stream parser, the HTTP client) would sit in its memory.
const CLIENT_PACKAGES = ['eventsource-parser', 'undici'];
t.test('platform serve loads none of the client commands\' packages', async (t) => {
  const { stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
    execFile(process.execPath, ['--import', hook, cli, 'serve', '--help'], (error, stdout, stderr) => (error ? reject(error) : resolve({ stdout, stderr }))),
  );
  const loaded = loadedPackages(stderr);
  t.ok(loaded.includes('commander'), 'the hook saw the packages loaded');
  t.same(loaded.filter((name) => CLIENT_PACKAGES.includes(name!)), [], `loaded: ${loaded.join(', ')}`);
});
