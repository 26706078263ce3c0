import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { ensureCommand } from './system-packages.js';
import { freePort } from './free-port.js';
import { makeServerCertificate } from './tls-certificates.js';
import { waitFor } from './wait.js';

// Debian's pebble as a real ACME server, with pebble-challtestsrv as its DNS server answering
// every name with 127.0.0.1, so pebble validates HTTP-01 against the gateway's plain port on
// loopback. PEBBLE_VA_NOSLEEP makes validation immediate; nothing is declared always valid.

export interface Pebble {
  /** The ACME directory URL. */
  directory: string;
  /** PEM of the CA pebble's own HTTPS listener is signed by (--acme-ca-file). */
  listenerCaFile: string;
  /** PEM root that issued certificates chain to (from the management port's /roots/0). */
  issuingRoot(): Promise<string>;
  /** pebble's output so far (each new order is logged). */
  output(): string;
  stop(): Promise<void>;
}

export interface PebbleOptions {
  /** The port pebble connects to for HTTP-01: the gateway's plain port. */
  httpPort: number;
  /** Lifetime of issued certificates in seconds (pebble's default is five years). */
  certificateValiditySeconds?: number;
  /** Names pebble refuses to issue for (its policy error is what a failed order reports). */
  blockedDomains?: string[];
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

export async function startPebble(options: PebbleOptions): Promise<Pebble> {
  ensureCommand('pebble', 'pebble');
  ensureCommand('pebble-challtestsrv', 'pebble');
  const dir = mkdtempSync(join(tmpdir(), 'pebble-'));
  const children: ChildProcess[] = [];
  let log = '';
  try {
    const [acmePort, managementPort, dnsPort, challtestManagement, tlsPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
    const listener = makeServerCertificate(dir, 'pebble', ['127.0.0.1']);
    const configFile = join(dir, 'pebble.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        pebble: {
          listenAddress: `127.0.0.1:${acmePort}`,
          managementListenAddress: `127.0.0.1:${managementPort}`,
          certificate: listener.cert,
          privateKey: listener.key,
          httpPort: options.httpPort,
          tlsPort,
          ocspResponderURL: '',
          externalAccountBindingRequired: false,
          ...(options.certificateValiditySeconds ? { certificateValidityPeriod: options.certificateValiditySeconds } : {}),
          ...(options.blockedDomains ? { domainBlocklist: options.blockedDomains } : {}),
        },
      }),
    );
    const dns = spawn('pebble-challtestsrv', ['-defaultIPv4', '127.0.0.1', '-defaultIPv6', '', '-dns01', `127.0.0.1:${dnsPort}`, '-http01', '', '-https01', '', '-tlsalpn01', '', '-management', `127.0.0.1:${challtestManagement}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(dns);
    const pebble = spawn('pebble', ['-config', configFile, '-dnsserver', `127.0.0.1:${dnsPort}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
      // No random nonce rejections or authorization reuse: each order validates its own HTTP-01.
      env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' },
    });
    children.push(pebble);
    for (const child of children) {
      child.stdout!.on('data', (chunk: Buffer) => (log += chunk.toString()));
      child.stderr!.on('data', (chunk: Buffer) => (log += chunk.toString()));
    }
    const trusting = new Agent({ connect: { ca: readFileSync(listener.ca, 'utf8') } });
    const directory = `https://127.0.0.1:${acmePort}/dir`;
    await waitFor(async () => {
      if (pebble.exitCode !== null) throw new Error(`pebble exited: ${log}`);
      try {
        const reply = await request(directory, { dispatcher: trusting });
        await reply.body.text();
        return reply.statusCode === 200;
      } catch {
        return false;
      }
    }, 15_000, { what: 'pebble to answer' });
    return {
      directory,
      listenerCaFile: listener.ca,
      issuingRoot: async () => {
        const reply = await request(`https://127.0.0.1:${managementPort}/roots/0`, { dispatcher: trusting });
        return reply.body.text();
      },
      output: () => log,
      stop: async () => {
        await Promise.all(children.map(stopChild));
        await trusting.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await Promise.all(children.map(stopChild));
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
