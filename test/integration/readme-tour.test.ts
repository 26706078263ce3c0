import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDockerd } from '../harness/docker.js';
import { ensureCommand } from '../harness/system-packages.js';
import { holdDefaultPorts } from '../harness/default-ports.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { printsAmongOthers, printsAsShown, tourSteps, type TourStep } from '../harness/readme-tour.js';

// The README's tour, run from the file as it is written (issue 31), so the two cannot drift: each
// block in bash, in this repository, as a reader on a Debian machine with Docker would paste it.
// A block meant for a terminal of its own (the registry, `npm start`) runs in the background until
// it has printed what the README shows; every other block runs to its end and must print exactly
// what the README shows. The test supplies what the reader's machine has: a Docker engine (the
// harness's, without a bridge network, named by DOCKER_HOST), a home directory, and the packages
// the tour installs with apt (docker-registry, busybox-static). The tour uses the default ports
// (the registry on 127.0.0.1:5000, the platform's), which the tests that run `platform up` share.

const root = fileURLToPath(new URL('../../../', import.meta.url));
const steps = tourSteps(readFileSync(join(root, 'README.md'), 'utf8'));

ensureCommand('docker-registry', 'docker-registry');
ensureCommand('busybox', 'busybox-static');
const releaseDefaultPorts = await holdDefaultPorts();
t.teardown(releaseDefaultPorts);
const engine = await startDockerd();
const home = mkdtempSync(join(tmpdir(), 'platform-tour-home-'));
t.teardown(async () => {
  await engine.stop();
  rmSync(home, { recursive: true, force: true });
});

/** The reader's environment: none of the test's own platform, Docker or npm settings. */
const readerEnv: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(PLATFORM_|DOCKER_|npm_|TAP)/i.test(name))),
  HOME: home,
  DOCKER_HOST: engine.dockerHost,
  // `npm start` in this repository keeps its store in .platform-data there; the test keeps it in its home.
  PLATFORM_DATA_DIR: join(home, '.platform-data'),
  NO_UPDATE_NOTIFIER: '1',
  npm_config_update_notifier: 'false',
};

interface Terminal {
  child: ChildProcess;
  printed(): string;
}

function openTerminal(script: string): Terminal {
  const child = spawn('bash', ['-e', '-c', script], { cwd: root, env: readerEnv, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let printed = '';
  const keep = (chunk: Buffer) => (printed += chunk.toString());
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  return { child, printed: () => printed };
}

const terminals: Terminal[] = [];
// Whatever happens to the test, nothing it started outlives it.
process.on('exit', () => {
  for (const { child } of terminals) if (child.pid) killGroup(child.pid, 'SIGKILL');
});

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // gone already
  }
}

/** Ctrl-C in its terminal, as the README says; the last terminal opened is closed first. */
async function closeTerminal({ child }: Terminal): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || !child.pid) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  killGroup(child.pid, 'SIGINT');
  const timer = setTimeout(() => killGroup(child.pid!, 'SIGKILL'), 20_000);
  await exited;
  clearTimeout(timer);
}
t.teardown(async () => {
  for (const terminal of [...terminals].reverse()) await closeTerminal(terminal);
});

function runToEnd(script: string): Promise<{ code: number | null; printed: string }> {
  const terminal = openTerminal(script);
  terminals.push(terminal);
  return new Promise((resolve) => terminal.child.once('exit', (code) => resolve({ code, printed: terminal.printed() })));
}

/** Waits until the terminal has printed what the README shows; why not, if it exits or time runs out first. */
async function untilShown(terminal: Terminal, shown: string, timeoutMs: number): Promise<string | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (!printsAmongOthers(terminal.printed(), shown)) {
    if (terminal.child.exitCode !== null) return `it exited with ${terminal.child.exitCode}`;
    if (Date.now() > deadline) return `not printed within ${timeoutMs / 1000} s`;
    await sleep(100);
  }
  return undefined;
}

const describe = (step: TourStep) => `README.md line ${step.line}: ${step.script.split('\n')[0]}`;

t.ok(steps.length > 0, 'the README has a tour');
for (const step of steps) {
  if (step.kind === 'own-terminal') {
    await t.test(`${describe(step)} (a terminal of its own)`, async (t) => {
      const terminal = openTerminal(step.script);
      terminals.push(terminal);
      t.ok(step.output !== undefined, 'the README shows what it prints once it is ready');
      const failure = await untilShown(terminal, step.output ?? '', 90_000);
      t.notOk(failure, 'it prints what the README shows and keeps running', { failure, printed: terminal.printed(), shown: step.output });
    });
  } else {
    await t.test(describe(step), async (t) => {
      const { code, printed } = await runToEnd(step.script);
      t.equal(code, 0, 'it succeeds', { printed });
      t.ok(step.output !== undefined, 'the README shows what it prints');
      t.ok(printsAsShown(printed, step.output ?? ''), 'it prints what the README shows', { printed, shown: step.output });
    });
  }
}
