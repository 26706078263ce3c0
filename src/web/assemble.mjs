// Part of `npm run build`: puts the dashboard together in dist/src/web, which the orchestrator and
// the web role serve. tsc compiles the page's scripts into dist/web-modules, with the parts of
// src/schemas they import (src/web/tsconfig.json); only the modules the page loads are copied beside
// its page, styles and icons. A schema the page imports for its types alone is not among them, so
// no server code ships. The page lists every module it loads as a module preload, so the browser
// fetches them at once instead of one import level at a time. uPlot, the graphs' library, is copied
// from its npm package into assets/vendor/uplot/ (its ES module and styles, with its licence); the
// service page imports it by URL when it first draws, so it is not among the preloads.
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const source = fileURLToPath(new URL('public/', import.meta.url));
const compiled = fileURLToPath(new URL('../../dist/web-modules/', import.meta.url));
const target = fileURLToPath(new URL('../../dist/src/web/', import.meta.url));
const entry = 'web/app/main.js';

/** The entry and every module it imports, directly or not: paths relative to `root`. */
function moduleGraph(root, start) {
  const found = new Set();
  const visit = (path) => {
    if (found.has(path)) return;
    found.add(path);
    const imports = ts.preProcessFile(readFileSync(join(root, path), 'utf8'), true, true).importedFiles;
    for (const { fileName } of imports) visit(normalize(join(dirname(path), fileName)));
  };
  visit(start);
  return [...found].sort();
}

rmSync(target, { recursive: true, force: true });
cpSync(source, target, { recursive: true });
const uplot = fileURLToPath(new URL('../../node_modules/uplot/', import.meta.url));
mkdirSync(join(target, 'assets/vendor/uplot'), { recursive: true });
for (const file of ['dist/uPlot.esm.js', 'dist/uPlot.min.css', 'LICENSE']) cpSync(join(uplot, file), join(target, 'assets/vendor/uplot', file.replace('dist/', '')));
const modules = moduleGraph(compiled, entry);
for (const path of modules) {
  mkdirSync(dirname(join(target, 'assets/js', path)), { recursive: true });
  cpSync(join(compiled, path), join(target, 'assets/js', path));
}
const preloads = modules.map((path) => `<link rel="modulepreload" href="assets/js/${path}">`).join('\n    ');
const page = readFileSync(`${target}index.html`, 'utf8');
writeFileSync(`${target}index.html`, page.replace('<!-- modulepreload -->', preloads));
