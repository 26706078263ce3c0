import { createServer } from 'node:net';

/**
 * A TCP port that was free on 127.0.0.1 a moment ago: bind port 0, read what the kernel chose,
 * release it. Another process could take it before the caller binds it; on loopback in tests
 * that race is rare enough to accept.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('could not read the port of a loopback listener'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}
