import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { ensureCommand } from '../harness/system-packages.js';

// Debian's Chromium driven by playwright-core (which downloads no browser of its own), headless,
// with a fresh profile per launch (Playwright makes a temporary one) and no background traffic,
// so a test page makes only the requests the dashboard itself makes.

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

const flags = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export async function launchChromium(): Promise<Browser> {
  ensureCommand('chromium', 'chromium');
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: flags, timeout: 60_000 });
}

/**
 * Builds the dashboard's scripts and copies its page and styles into dist/src/web (`npm run
 * build:web`), so the page under test is the current source even when only `tsc -p .` ran.
 */
export function buildDashboard(): void {
  execFileSync('npm', ['run', '--silent', 'build:web'], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'], timeout: 120_000 });
}

export const screenshotDir = join(repoRoot, 'test-output', 'screenshots');
