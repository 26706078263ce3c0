import { connect } from 'node:net';

// A unit counts as running once its port accepts TCP connections, so the gateway and rollouts
// never send traffic to a container that has started but is not listening yet.

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
