import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { writeFileAtomically } from '../../atomic-file.js';
import { createSecureContext } from 'node:tls';
import { join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import type { CertificateEntry, CertificateSet } from '../../certificates/certificate-set.js';
import type { PublicHosts } from './tls/public-hosts.js';
import { refusals, runtimeCommand } from './haproxy-runtime.js';

// The HAProxy data plane's certificates: one PEM file (chain and key, mode 0600) per public host
// that has a certificate, listed in a crt-list with the host as its only SNI filter, so a wildcard
// certificate is served for the public hosts it covers and for no other name under it (an
// internal-only service's name fails the handshake, as on the Node plane). Changes are applied
// through the Runtime API (management guide: new/set/commit/del ssl cert, add/del ssl crt-list)
// with no reload; the files are written first, so a reload or restart starts from the same set.
// The crt-list's first line is a self-signed placeholder: HAProxy takes a bind's first certificate
// as its default and refuses to delete it at runtime; with strict-sni it is never served.

/** The SNI filter of the placeholder line: `.invalid` names are never resolved (RFC 6761), so no client asks for it. */
export const PLACEHOLDER_NAME = 'placeholder.invalid';

/** host → the certificate serving it, as fingerprints: what HAProxy holds, or should. */
export type Served = ReadonlyMap<string, string>;

export interface CertificatePaths {
  crtList: string;
  placeholder: string;
  /** The file a host's chain and key are written to. */
  fileOf(host: string): string;
}

/** One change: the PEM to write (for `add`/`update`) and the Runtime API commands, run one per connection (payloads end at an empty line). */
export interface CertificateChange {
  host: string;
  kind: 'add' | 'update' | 'remove';
  commands: string[];
}

/** The crt-list file for what is served: the placeholder first, then one line per host. */
export const crtListFile = (served: Served, paths: CertificatePaths): string =>
  [`${paths.placeholder} ${PLACEHOLDER_NAME}`, ...[...served.keys()].sort().map((host) => `${paths.fileOf(host)} ${host}`)].map((line) => `${line}\n`).join('');

/** A chain and key as one PEM bundle with no empty line (a Runtime API payload ends at the first). */
export const pemBundle = (entry: Pick<CertificateEntry, 'chain' | 'key'>): string =>
  `${entry.chain}\n${entry.key}`
    .split('\n')
    .map((line) => line.trimEnd())
    .filter((line) => line.length > 0)
    .join('\n');

/** The Runtime API commands taking HAProxy from `live` to `wanted`; `pem(host)` gives the bundle for a host to add or update. */
export function certificateChanges(live: Served, wanted: Served, paths: CertificatePaths, pem: (host: string) => string): CertificateChange[] {
  const changes: CertificateChange[] = [];
  const load = (file: string, host: string) => [`set ssl cert ${file} <<\n${pem(host)}\n`, `commit ssl cert ${file}`];
  for (const [host, fingerprint] of wanted) {
    const file = paths.fileOf(host);
    const current = live.get(host);
    if (current === undefined) changes.push({ host, kind: 'add', commands: [`new ssl cert ${file}`, ...load(file, host), `add ssl crt-list ${paths.crtList} <<\n${file} ${host}\n`] });
    else if (current !== fingerprint) changes.push({ host, kind: 'update', commands: load(file, host) });
  }
  for (const host of live.keys()) {
    if (wanted.has(host)) continue;
    const file = paths.fileOf(host);
    changes.push({ host, kind: 'remove', commands: [`del ssl crt-list ${paths.crtList} ${file}`, `del ssl cert ${file}`] });
  }
  return changes;
}

export class HaproxyCertificates {
  /** What the running HAProxy serves (from the files it started from, then the commands applied). */
  private live: Served = new Map();
  /** What the files on disk list. */
  private written: Served = new Map();
  private readonly paths: CertificatePaths;
  private readonly dir: string;
  /** Fingerprint → whether OpenSSL loads it (checked once per certificate). */
  private readonly checked = new Map<string, boolean>();

  constructor(
    private readonly certificates: CertificateSet,
    private readonly hosts: PublicHosts,
    stateDir: string,
    private readonly log: FastifyBaseLogger,
  ) {
    this.dir = join(stateDir, 'certs');
    this.paths = { crtList: join(stateDir, 'certs.list'), placeholder: join(this.dir, 'placeholder.pem'), fileOf: (host) => join(this.dir, `${host}.pem`) };
  }

  get crtList(): string {
    return this.paths.crtList;
  }

  /** Calls `changed` when the certificates or the public hosts change. */
  follow(changed: () => void): void {
    this.certificates.onChange(changed);
    this.hosts.onChange(changed);
  }

  /** The files HAProxy starts from (before a start, reload or restart): every PEM, then the crt-list. */
  writeAll(): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    this.writePlaceholder();
    const wanted = this.wanted();
    for (const host of wanted.keys()) this.writePem(host);
    // Hosts that left while the gateway was down: their keys are not left on disk.
    const kept = new Set([this.paths.placeholder, ...[...wanted.keys()].map((host) => this.paths.fileOf(host))]);
    for (const file of readdirSync(this.dir)) if (!kept.has(join(this.dir, file))) rmSync(join(this.dir, file), { force: true });
    writeFileAtomically(this.paths.crtList, crtListFile(wanted, this.paths), { mode: 0o600 });
    this.written = wanted;
  }

  /** What HAProxy serves, for the next gateway to take over (haproxy-handover.ts). */
  handedOver(): [string, string][] {
    return [...this.live];
  }

  /** HAProxy serves what a previous gateway handed over; the files are its too. */
  takeOver(served: [string, string][]): void {
    this.live = new Map(served);
    this.written = this.live;
  }

  /** A worker started from the files. */
  started(): void {
    this.live = this.written;
  }

  /** Applies what changed since HAProxy last loaded or was told; resolves with the answers that report a failure. */
  async apply(runtimeSocket: string): Promise<string[]> {
    const wanted = this.wanted();
    const changes = certificateChanges(this.live, wanted, this.paths, (host) => pemBundle(this.certificates.find(host)!));
    if (changes.length === 0) return [];
    // Files first: a reload or restart meanwhile starts from the new set.
    for (const change of changes) if (change.kind !== 'remove') this.writePem(change.host);
    writeFileAtomically(this.paths.crtList, crtListFile(wanted, this.paths), { mode: 0o600 });
    this.written = wanted;
    const failures: string[] = [];
    for (const change of changes) {
      for (const command of change.commands) {
        // The answer never echoes a payload, so it holds no key.
        const answer = await runtimeCommand(runtimeSocket, command);
        if (refusals([command], answer).length > 0) failures.push(`${command.split(' <<')[0]}: ${answer.trim()}`);
      }
      if (change.kind === 'remove') rmSync(this.paths.fileOf(change.host), { force: true });
      this.log.info({ host: change.host, change: change.kind }, 'haproxy certificate applied');
    }
    this.live = wanted;
    return failures;
  }

  /** Public host → fingerprint of the certificate serving it, for those that have one OpenSSL loads. */
  private wanted(): Map<string, string> {
    const wanted = new Map<string, string>();
    for (const host of this.hosts.all()) {
      const entry = this.certificates.find(host);
      if (entry !== undefined && this.loads(entry)) wanted.set(host, entry.fingerprint);
    }
    return wanted;
  }

  /** Whether OpenSSL takes the chain and key (a file HAProxy refuses would fail a reload). */
  private loads(entry: CertificateEntry): boolean {
    let ok = this.checked.get(entry.fingerprint);
    if (ok === undefined) {
      try {
        createSecureContext({ cert: entry.chain, key: entry.key });
        ok = true;
      } catch (error) {
        // OpenSSL's message names the failing step, never the key's content.
        this.log.warn({ host: entry.host, reason: (error as Error).message }, 'certificate not loaded');
        ok = false;
      }
      this.checked.set(entry.fingerprint, ok);
    }
    return ok;
  }

  private writePem(host: string): void {
    writeFileAtomically(this.paths.fileOf(host), `${pemBundle(this.certificates.find(host)!)}\n`, { mode: 0o600 });
  }

  /**
   * The placeholder's self-signed certificate, made once by the openssl command (Node has no
   * X.509 writer); its key protects nothing, as no handshake ever uses it.
   */
  private writePlaceholder(): void {
    if (existsSync(this.paths.placeholder)) return;
    const key = join(this.dir, 'placeholder.key');
    const cert = join(this.dir, 'placeholder.crt');
    try {
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', '36500', '-subj', `/CN=${PLACEHOLDER_NAME}`], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
    } catch (error) {
      throw new Error(`HTTPS on the HAProxy data plane needs the openssl command for its placeholder certificate (Debian package openssl): ${(error as Error).message}`, { cause: error });
    }
    writeFileAtomically(this.paths.placeholder, pemBundle({ chain: readFileSync(cert, 'utf8'), key: readFileSync(key, 'utf8') }) + '\n', { mode: 0o600 });
    rmSync(key, { force: true });
    rmSync(cert, { force: true });
  }
}
