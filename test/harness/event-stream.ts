import { request } from 'undici';
import { waitFor } from './wait.js';

// A reader of the orchestrator's GET /events (Server-Sent Events) for tests and benchmarks: it
// keeps every event and comment, finds the next matching one, and calls listeners as each
// arrives, so a benchmark can stop its clock on the event itself instead of polling.

export interface ServerSentEvent {
  event: string;
  id?: string;
  data: any;
}

export interface EventStream {
  events: ServerSentEvent[];
  comments: string[];
  /** Resolves when the server ends the stream or close() aborts it. */
  ended: Promise<void>;
  /** The next event of this kind (after the last one next() returned) that `match` accepts. */
  next(event: string, match?: (data: any) => boolean, timeoutMs?: number): Promise<ServerSentEvent>;
  /** Calls `listener` with every later event, as it is parsed; returns what stops it. */
  onEvent(listener: (event: ServerSentEvent) => void): () => void;
  close(): void;
}

export async function openEventStream(url: string, headers: Record<string, string> = {}): Promise<EventStream> {
  const controller = new AbortController();
  const response = await request(`${url}/events`, { headers, signal: controller.signal, bodyTimeout: 0 });
  if (response.statusCode !== 200) throw Object.assign(new Error(`GET /events answered ${response.statusCode}: ${await response.body.text()}`), { statusCode: response.statusCode });
  const events: ServerSentEvent[] = [];
  const comments: string[] = [];
  const listeners = new Set<(event: ServerSentEvent) => void>();
  let buffer = '';
  let seen = 0;
  const ended = (async () => {
    try {
      for await (const chunk of response.body) {
        buffer += chunk.toString();
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const parsed: Partial<ServerSentEvent> & { data?: string } = {};
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) comments.push(line);
            else if (line.startsWith('event: ')) parsed.event = line.slice(7);
            else if (line.startsWith('id: ')) parsed.id = line.slice(4);
            else if (line.startsWith('data: ')) parsed.data = line.slice(6);
          }
          if (!parsed.event) continue;
          const event: ServerSentEvent = { event: parsed.event, ...(parsed.id ? { id: parsed.id } : {}), data: JSON.parse(parsed.data ?? 'null') };
          events.push(event);
          for (const listener of listeners) listener(event);
        }
      }
    } catch {
      // aborted by close()
    }
  })();
  return {
    events,
    comments,
    ended,
    async next(event, match = () => true, timeoutMs = 5000) {
      return waitFor(() => {
        const index = events.findIndex((e, i) => i >= seen && e.event === event && match(e.data));
        if (index < 0) return undefined;
        seen = index + 1;
        return events[index];
      }, timeoutMs, { what: `a ${event} event` });
    },
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close: () => controller.abort(),
  };
}
