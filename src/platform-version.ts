import { readFileSync } from 'node:fs';

// The program's version is the package's: read once from package.json, which ships beside dist/
// in the checkout and in the Debian package alike.

export const platformVersion: string = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
