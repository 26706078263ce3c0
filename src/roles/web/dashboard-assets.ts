import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import { notFound, unavailable } from '../../http/errors.js';

// The dashboard's static files, built by `npm run build` into dist/src/web (src/web/ holds the
// sources). They are read once at start and served from memory; nothing is built at run time.
// The content security policy allows only this origin, so the page can make no outside request.
// The page and its assets need no token: without a session it shows the sign-in form, and no data.

/** dist/src/web, seen from this module's compiled place in dist/src/roles/web. */
export const defaultAssetsDir = fileURLToPath(new URL('../../web/', import.meta.url));

const contentTypes: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

const securityHeaders = {
  'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  if (!existsSync(dir)) return assets;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const type = contentTypes[extname(entry.name)];
    if (!entry.isFile() || !type) continue;
    const path = join(entry.parentPath, entry.name);
    const body = readFileSync(path);
    const url = `/${relative(dir, path).split(sep).join('/')}`;
    assets.set(url, { body, type, etag: `"${createHash('sha1').update(body).digest('base64url')}"` });
  }
  return assets;
}

/**
 * GET / (the dashboard page) and GET /assets/* (its scripts, styles and icons). `pageServed` is
 * called whenever the page itself is served, before its scripts ask for anything.
 */
export function dashboardRoutes(server: RoleServer, options: { dir?: string; pageServed?: () => void } = {}): void {
  const dir = options.dir ?? defaultAssetsDir;
  const assets = loadAssets(dir);
  const serve = async (url: string, request: FastifyRequest, reply: FastifyReply) => {
    const asset = assets.get(url);
    if (!asset) {
      if (url === '/index.html') throw unavailable(`the dashboard is not built (no ${join(dir, 'index.html')}): run npm run build`);
      throw notFound(`no dashboard asset ${url}`);
    }
    void reply.headers({ ...securityHeaders, etag: asset.etag, 'content-type': asset.type });
    if (request.headers['if-none-match'] === asset.etag) return reply.status(304).send();
    return reply.send(asset.body);
  };
  const open = { schema: { hide: true }, config: { access: 'open' as const } };
  server.get('/', open, (request, reply) => {
    options.pageServed?.();
    return serve('/index.html', request, reply);
  });
  server.get('/assets/*', open, (request, reply) => serve(`/assets/${(request.params as { '*': string })['*']}`, request, reply));
}
