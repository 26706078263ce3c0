import { connect } from 'node:net';
import { request } from '../../http/undici-request.js';

// A unit counts as running once it passes its probe, so the gateway and rollouts never send
// traffic to a container that has started but is not serving yet: an HTTP GET of the service's
// health-check path when it defines one (2xx or 3xx passes), else a TCP connect to its port.

export function acceptsConnections(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export async function answersHealthCheck(host: string, port: number, path: string, timeoutMs = 1000): Promise<boolean> {
  try {
    const response = await request(`http://${host}:${port}${path}`, { headersTimeout: timeoutMs, bodyTimeout: timeoutMs, reset: true });
    await response.body.dump();
    return response.statusCode >= 200 && response.statusCode < 400;
  } catch {
    return false;
  }
}

export const passesProbe = (host: string, port: number, healthCheck?: { path: string }): Promise<boolean> =>
  healthCheck ? answersHealthCheck(host, port, healthCheck.path) : acceptsConnections(host, port);
