import { connect } from 'node:net';

// HAProxy's Runtime API on its stats socket (management guide, "Unix Socket commands"): one
// connection per batch, commands separated by `;`, the answers read until HAProxy closes.

/** Commands per connection: a batch is one line, and HAProxy reads a line into one buffer. */
const BATCH = 40;
const TIMEOUT_MS = 5_000;

/** Sends one line of commands and resolves with everything HAProxy answered. */
export function runtimeCommand(socketPath: string, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(socketPath);
    let answer = '';
    socket.setEncoding('utf8');
    socket.setTimeout(TIMEOUT_MS, () => socket.destroy(new Error(`HAProxy's runtime socket did not answer within ${TIMEOUT_MS} ms`)));
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.once('error', reject);
    socket.once('close', (failed) => {
      if (!failed) resolve(answer);
    });
    socket.end(`${line}\n`);
  });
}

/**
 * Answers that mean a command failed. The Runtime API answers success with nothing or a notice
 * (`Success!`, `Inserting …`, `Transaction created …`), never with one of these words.
 */
const failure = /no such|unknown|not found|doesn't exist|require|invalid|can't|cannot|fail|error|already/i;

/**
 * The lines of an answer to `commands` that report a failure. The names the commands carry (map
 * and certificate files, backends, servers, units, routes: a service may be called `error-pages`)
 * are left out of the test, as HAProxy may echo them; the longest first, so a name inside another
 * goes with it. A payload's words (after `<<`) count too: crt-list lines name files HAProxy echoes.
 */
export function refusals(commands: readonly string[], answer: string): string[] {
  const names = [...new Set(commands.flatMap((command) => command.split(/\s+/).slice(2).flatMap((word) => [word, ...word.split('/')])))]
    .filter((name) => name.length > 0)
    .sort((a, b) => b.length - a.length);
  return answer
    .split('\n')
    .filter((line) => failure.test(names.reduce((text, name) => text.split(name).join(' '), line)))
    .map((line) => line.trim());
}

/** Runs the commands in order; resolves with the answers that report a failure (none: all applied). */
export async function runtimeCommands(socketPath: string, commands: readonly string[]): Promise<string[]> {
  const failures: string[] = [];
  for (let start = 0; start < commands.length; start += BATCH) {
    const batch = commands.slice(start, start + BATCH);
    failures.push(...refusals(batch, await runtimeCommand(socketPath, batch.join(';'))));
  }
  return failures;
}

export interface ServerStat {
  backend: string;
  server: string;
  /** UP, DRAIN, MAINT, no check, … */
  status: string;
  address: string;
  /** Sessions open now. */
  current: number;
}

/** `show stat` as rows keyed by its CSV header. */
export function parseStat(csv: string): Record<string, string>[] {
  const lines = csv.split('\n').filter((line) => line.length > 0);
  const header = (lines.shift() ?? '').replace(/^# /, '').split(',');
  return lines.map((line) => {
    const values = line.split(',');
    return Object.fromEntries(header.map((name, i) => [name, values[i] ?? '']));
  });
}

/** The servers HAProxy runs, as its own statistics say. */
export async function serverStats(socketPath: string): Promise<ServerStat[]> {
  const rows = parseStat(await runtimeCommand(socketPath, 'show stat -1 4 -1'));
  return rows.map((row) => ({ backend: row.pxname!, server: row.svname!, status: row.status!, address: row.addr!, current: Number(row.scur) }));
}

/** host → backend, as HAProxy's map holds it (`show map`: `<ref> <key> <value>` lines). */
export async function mapEntries(socketPath: string, mapFile: string): Promise<Map<string, string>> {
  const answer = await runtimeCommand(socketPath, `show map ${mapFile}`);
  const entries = new Map<string, string>();
  for (const line of answer.split('\n')) {
    const [, key, value] = line.trim().split(' ');
    if (key !== undefined && value !== undefined) entries.set(key, value);
  }
  return entries;
}

/** The worker's process id (`show info`), which changes when a reload has taken effect. */
export async function workerPid(socketPath: string): Promise<number> {
  const answer = await runtimeCommand(socketPath, 'show info');
  const match = /^Pid: (\d+)$/m.exec(answer);
  if (!match) throw new Error('HAProxy answered show info without its Pid');
  return Number(match[1]);
}
