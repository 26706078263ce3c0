import { createSocket, type Socket } from 'node:dgram';
import type { FastifyBaseLogger } from 'fastify';
import type { ServiceMetrics } from './gateway-metrics.js';

// How HAProxy tells the gateway what its requests took. HAProxy counts requests and answers per
// backend (haproxy-traffic-counters.ts reads those counts), but keeps no latency distribution
// (`show stat` has only averages over the last 1024 requests), so for the p95 graph and the
// latency histogram it logs a short line for one routed request in TRAFFIC_LOG_SAMPLE_EVERY
// (trafficLogLines in haproxy-config.ts): the route of its backend and %Ta (milliseconds from the
// request to the end of the answer, as the Node plane measures). A line per request cost HAProxy
// 6-18 % more CPU per request and the gateway's Node process 15-25 µs a request to receive it
// (docs/benchmarks.md, "The HAProxy plane's traffic figures"). The lines come over UDP on
// 127.0.0.1 — Node has no Unix datagram sockets.

/**
 * HAProxy logs the first of every this many routed requests (`log … sample 1:11`); each line
 * stands for this many requests in the latency figures. Prime, so that a load repeating every 2,
 * 5 or 10 requests (two services called in turn) still has every service's requests sampled.
 */
export const TRAFFIC_LOG_SAMPLE_EVERY = 11;

/** `service:<name> <Ta ms>`; an aborted request's %Ta is -1 and gives no line a time. */
const LINE = /^(service|component):([a-z0-9-]+) (\d+)/;

/** A received line's route and seconds, or undefined for a line that is not a routed request's. */
export function parseTrafficLine(line: string): { kind: string; name: string; seconds: number } | undefined {
  const match = LINE.exec(line);
  if (!match) return undefined;
  return { kind: match[1]!, name: match[2]!, seconds: Number(match[3]) / 1000 };
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
    if (request) this.metricsOf(request.name)?.sampled(request.seconds, TRAFFIC_LOG_SAMPLE_EVERY);
  }

  close(): void {
    this.socket?.close();
    this.socket = undefined;
  }
}
