import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../harness/free-port.js';
import { loadedPackages, packageHook as hook } from '../harness/package-hook.js';

// An idle role loads only what it needs to start and to answer (issue 29: every role <= 100 MiB
// idle). undici, for calls to agents, registries and notification endpoints, is loaded with the
// first such call (src/http/undici-request.ts); an orchestrator, scheduler and agent that have
// made none never load it. cron-parser (with luxon, 8.4 MiB) is loaded by the first schedule read
// or checked (src/schedules/schedule-plan.ts), so a directory and scheduler without one never
// import it. A resolve hook lists every package the process imports
// (test/harness/package-hook.ts).

const cli = fileURLToPath(new URL('../../src/cli.js', import.meta.url));
async function answers(url: string): Promise<boolean> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(1000) });
    await response.body?.cancel();
    return response.ok;
  } catch {
    return false;
  }
}

t.test('an idle orchestrator, scheduler, directory and agent load no undici and no cron-parser', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'role-startup-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const ports = { orchestrator: await freePort(), scheduler: await freePort(), agent: await freePort(), directory: await freePort() };
  const roles = Object.keys(ports);
  // The agent's engine does not exist: it starts, reports the engine unreachable, and answers.
  const child = spawn(
    process.execPath,
    ['--import', hook, cli, 'serve', '--role', roles.join(','), '--ports', roles.map((role) => `${role}=${ports[role as keyof typeof ports]}`).join(','), '--data-dir', dataDir, '--machine-id', 'role-startup', '--network', 'host'],
    { env: { ...process.env, DOCKER_HOST: `unix://${join(dataDir, 'no-engine.sock')}`, PLATFORM_LOG_LEVEL: 'error' }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  const deadline = Date.now() + 60_000;
  for (const port of Object.values(ports)) {
    while (!(await answers(`http://127.0.0.1:${port}/healthz`))) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the roles did not answer: ${stderr}`);
      await sleep(100);
    }
  }
  // What the roles do once started (their first store reads and watches, the agent's engine check).
  await sleep(2000);
  child.kill('SIGINT');
  await once(child, 'exit');
  const loaded = loadedPackages(stderr);
  t.ok(loaded.includes('fastify') && loaded.includes('dockerode'), `the hook saw the roles' packages: ${loaded.join(', ')}`);
  t.notOk(loaded.includes('undici'), 'undici is not loaded');
  t.notOk(loaded.includes('cron-parser') || loaded.includes('luxon'), 'cron-parser and luxon are not loaded');
});
