// A TCP connection to a role that writes exactly the bytes a test chooses, when it chooses: slow
// heads, bodies that never finish, idle connections. Records what the server answered and when it
// closed the connection.

import { connect, type Socket } from 'node:net';

export interface Closed {
  /** Milliseconds from opening the connection to its close. */
  afterMs: number;
  /** Everything the server sent. */
  received: string;
}

export interface RawConnection {
  readonly socket: Socket;
  /** Resolves once the connection is open. */
  readonly opened: Promise<void>;
  /** Resolves when the connection closes, by either side. */
  readonly closed: Promise<Closed>;
  /** Writes `text` one byte every `intervalMs` until it is all written or the connection closed. */
  drip(text: string, intervalMs: number): void;
  /** What the server has sent so far. */
  received(): string;
}

/** Opens a connection to 127.0.0.1:`port`, from `localAddress` (any 127.x.y.z) if given. */
export function openRaw(port: number, localAddress?: string): RawConnection {
  const started = Date.now();
  const socket = connect({ port, host: '127.0.0.1', ...(localAddress ? { localAddress } : {}) });
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    received += chunk;
  });
  socket.on('error', () => undefined);
  const opened = new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('close', () => reject(new Error(`connection to port ${port} closed before it opened`)));
  });
  opened.catch(() => undefined);
  const closed = new Promise<Closed>((resolve) => socket.once('close', () => resolve({ afterMs: Date.now() - started, received })));
  const drip = (text: string, intervalMs: number) => {
    let next = 0;
    const timer = setInterval(() => {
      if (socket.destroyed || next >= text.length) return clearInterval(timer);
      socket.write(text[next++]!);
    }, intervalMs);
    socket.once('close', () => clearInterval(timer));
    if (text.length > 0) socket.write(text[next++]!);
  };
  return { socket, opened, closed, drip, received: () => received };
}

/** The status code of the first answer in `received`, or undefined. */
export const statusOf = (received: string): number | undefined => {
  const match = /^HTTP\/1\.1 (\d{3})/.exec(received);
  return match ? Number(match[1]) : undefined;
};

/** The JSON body of the first answer in `received` (an error reply), or undefined. */
export const jsonBodyOf = (received: string): { statusCode?: number; message?: string } | undefined => {
  const body = received.split('\r\n\r\n')[1];
  try {
    return body ? (JSON.parse(body) as { statusCode?: number; message?: string }) : undefined;
  } catch {
    return undefined;
  }
};
