import type { FastifyBaseLogger } from 'fastify';
import type { Store, Watch } from '../../store/store.js';
import { schedulerReplyKey, schedulerRequestKey, schedulerRequestPrefix, lastSegment } from '../../store/keys.js';
import { HttpError, unavailable } from '../../http/errors.js';
import type { DeployTrigger } from './deploys/deploy.js';
import type { JobStart } from './deploys/jobs.js';
import { timeOrderedId } from '../../store/ids.js';

// A follower scheduler hands the work it is asked for to the leader through the store: it writes
// a request key and waits for the leader's reply key. Any scheduler can be given a webhook or a
// deploy call, or a job to start or stop; the one that leads does the work, and the caller gets the leader's answer.

export type LeaderRequest =
  | { kind: 'deploy'; trigger: DeployTrigger }
  | { kind: 'rollback'; service: string; version: number; runReleaseCommand?: boolean }
  | { kind: 'stop'; service: string }
  | { kind: 'job-start'; job: JobStart }
  | { kind: 'job-stop'; service: string; id: string };

export interface LeaderReply {
  status: number;
  body: unknown;
}

export class HandOff {
  private requests: Watch | undefined;
  private readonly handled = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Follower side: asks the leader and waits for its reply; 4xx/5xx replies are thrown as HttpError. */
  async send(request: LeaderRequest, timeoutMs: number): Promise<unknown> {
    const id = timeOrderedId();
    const replyKey = schedulerReplyKey(id);
    const lease = await this.store.grantLease(Math.ceil(timeoutMs / 1000) + 10);
    let watch: Watch | undefined;
    try {
      const reply = await new Promise<LeaderReply>((resolve, reject) => {
        const timer = setTimeout(() => reject(unavailable(`no scheduler leader answered within ${timeoutMs / 1000} s`)), timeoutMs);
        void this.store
          .watchPrefix(replyKey, (event) => {
            if (event.type !== 'put' || event.key !== replyKey) return;
            clearTimeout(timer);
            resolve(JSON.parse(event.value ?? '{}') as LeaderReply);
          })
          .then(async (created) => {
            watch = created;
            await this.store.put(schedulerRequestKey(id), JSON.stringify(request), { lease: lease.id });
          })
          .catch((error) => {
            clearTimeout(timer);
            reject(error);
          });
      });
      if (reply.status >= 400) throw new HttpError(reply.status, (reply.body as { message?: string })?.message ?? `the leader answered ${reply.status}`);
      return reply.body;
    } finally {
      await watch?.close();
      await lease.revoke().catch(() => undefined);
      await this.store.delete(replyKey).catch(() => undefined);
    }
  }

  /** Leader side: runs every pending and future request through `execute`, and writes its reply. */
  async serve(execute: (request: LeaderRequest) => Promise<LeaderReply>, isLeader: () => boolean): Promise<void> {
    const handle = (key: string, value: string) => {
      const id = lastSegment(key);
      if (!isLeader() || this.handled.has(id)) return;
      this.handled.add(id);
      void execute(JSON.parse(value) as LeaderRequest)
        .then((reply) => this.store.put(schedulerReplyKey(id), JSON.stringify(reply)))
        .catch((error) => this.log.warn({ err: error, request: id }, 'could not answer a handed-off request'))
        .finally(() => setTimeout(() => this.handled.delete(id), 60_000).unref());
    };
    this.requests ??= await this.store.watchPrefix(schedulerRequestPrefix, (event) => {
      if (event.type === 'put' && event.value) handle(event.key, event.value);
    });
    for (const kv of await this.store.list(schedulerRequestPrefix)) handle(kv.key, kv.value);
  }

  async close(): Promise<void> {
    await this.requests?.close();
  }
}
