import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { request } from 'undici';

// Issue 31 item 5: whether the HAProxy plane's latency lines (src/roles/gateway/haproxy-traffic-log.ts)
// reach the gateway under full load. Counted where the lines arrive: a receiver like the gateway's
// for a generated configuration run by hand, the gateway's own request counter for the plane, and
// the kernel's count of datagrams dropped on a full receive buffer.

export interface LineCounter {
  port: number;
  /** Datagrams received so far. */
  lines(): number;
  close(): void;
}

/** A UDP receiver on 127.0.0.1 with the gateway's receive buffer, counting what arrives. */
export async function startLineCounter(recvBufferSize = 4 * 1024 * 1024): Promise<LineCounter> {
  const socket = createSocket({ type: 'udp4', recvBufferSize });
  let lines = 0;
  socket.on('message', () => (lines += 1));
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(0, '127.0.0.1', () => resolve());
  });
  return { port: socket.address().port, lines: () => lines, close: () => socket.close() };
}

/** Datagrams the kernel dropped because a socket's receive buffer was full (the whole machine's, /proc/net/snmp). */
export function udpReceiveBufferErrors(): number {
  const [names, values] = readFileSync('/proc/net/snmp', 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('Udp: '))
    .map((line) => line.split(/\s+/));
  const at = names?.indexOf('RcvbufErrors') ?? -1;
  return at < 0 ? 0 : Number(values?.[at] ?? 0);
}

/**
 * The observations of `service`'s platform_gateway_request_duration_seconds histogram: on the
 * HAProxy plane each line received counts TRAFFIC_LOG_SAMPLE_EVERY (platform_gateway_requests_total
 * counts the Node plane's answers only).
 */
export async function gatewayTimedRequests(gatewayUrl: string, service: string): Promise<number> {
  const { body } = await request(`${gatewayUrl}/metrics`);
  const text = await body.text();
  const count = new RegExp(`^platform_gateway_request_duration_seconds_count\\{service="${service}"\\} (\\d+)$`, 'm').exec(text);
  return Number(count?.[1] ?? 0);
}
