import { readFileSync } from 'node:fs';

// The kernel's TCP counters (/proc/net/netstat) a full accept queue shows in: a unit whose
// listen backlog is full drops the handshake (ListenOverflows), and the proxy's connect is then
// retried by TCP after its retransmission timeout (TCPSynRetrans), a tail of 1 s or more. They
// count the whole network namespace, so other processes' connections count too.

export interface TcpCounters {
  listenOverflows: number;
  synRetransmits: number;
}

export function tcpCounters(): TcpCounters {
  const lines = readFileSync('/proc/net/netstat', 'utf8').split('\n').filter((line) => line.startsWith('TcpExt:'));
  const names = lines[0]!.split(' ');
  const values = lines[1]!.split(' ').map(Number);
  const value = (name: string): number => values[names.indexOf(name)] ?? 0;
  return { listenOverflows: value('ListenOverflows'), synRetransmits: value('TCPSynRetrans') };
}

export const countersBetween = (before: TcpCounters, after: TcpCounters): TcpCounters => ({
  listenOverflows: after.listenOverflows - before.listenOverflows,
  synRetransmits: after.synRetransmits - before.synRetransmits,
});
