// Part of `npm run build`: the dashboard's page, styles and icons go beside its compiled scripts
// in dist/src/web, which the orchestrator and the web role serve. The page lists every script as
// a module preload, so the browser fetches them at once instead of one import level at a time.
import { cpSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const source = fileURLToPath(new URL('public/', import.meta.url));
const target = fileURLToPath(new URL('../../dist/src/web/', import.meta.url));
cpSync(source, target, { recursive: true });

const scripts = readdirSync(`${target}assets/js`).filter((name) => name.endsWith('.js')).sort();
const preloads = scripts.map((name) => `<link rel="modulepreload" href="assets/js/${name}">`).join('\n    ');
const page = readFileSync(`${target}index.html`, 'utf8');
writeFileSync(`${target}index.html`, page.replace('<!-- modulepreload -->', preloads));
