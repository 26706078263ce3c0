import { createSocket, type Socket } from 'node:dgram';
import type { FastifyBaseLogger } from 'fastify';
import type { ServiceMetrics } from './gateway-metrics.js';

// How HAProxy tells the gateway what each request took. HAProxy keeps counters per backend but no
// latency distribution (`show stat` has only averages over the last 1024 requests), so for the
// p95 graph it logs one short line per request (trafficLogLines in haproxy-config.ts): the route of
// its backend, the status and %Ta (milliseconds from the request to the end of the answer, as the
// Node plane measures). The lines come over UDP on 127.0.0.1 — Node has no Unix datagram sockets —
// and are counted into the same per-service figures as the Node plane's answers.

/** `service:<name> <status> <Ta ms>`; a line of a request HAProxy did not route has no route. */
const LINE = /^(service|component):([a-z0-9-]+) (\d{3}) (\d+)/;

/** A received line's route, status and seconds, or undefined for a line that is not a routed request's. */
export function parseTrafficLine(line: string): { kind: string; name: string; status: number; seconds: number } | undefined {
  const match = LINE.exec(line);
  if (!match) return undefined;
  return { kind: match[1]!, name: match[2]!, status: Number(match[3]), seconds: Number(match[4]) / 1000 };
}

export class HaproxyTrafficLog {
  private socket: Socket | undefined;

  constructor(
    private readonly metricsOf: (route: string) => ServiceMetrics | undefined,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Listens on 127.0.0.1:`port` if it is free (the port a previous gateway's HAProxy logs to), else any; answers the port. */
  async listen(port: number): Promise<number> {
    try {
      return await this.bind(port);
    } catch (error) {
      if (port === 0) throw error;
      return this.bind(0);
    }
  }

  private bind(port: number): Promise<number> {
    const socket = createSocket({ type: 'udp4', recvBufferSize: 4 * 1024 * 1024 });
    return new Promise((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, '127.0.0.1', () => {
        socket.off('error', reject);
        socket.on('error', (error) => this.log.warn({ err: error }, 'HAProxy traffic log socket failed'));
        socket.on('message', (message) => this.received(message.toString('latin1')));
        this.socket = socket;
        resolve(socket.address().port);
      });
    });
  }

  private received(line: string): void {
    const request = parseTrafficLine(line);
    if (request) this.metricsOf(request.name)?.timed(request.status, request.seconds);
  }

  close(): void {
    this.socket?.close();
    this.socket = undefined;
  }
}
