import type { Readable } from 'node:stream';
import { request } from 'undici';
import { messageOf, parseOrText, requestJson, type JsonMethod } from '../http/json-request.js';
import type { CreatedReply, OrchestratorServiceCreate, Service, ServiceConfig, ServiceConfigPatch } from '../schemas/service.js';
import type { Deployment, DeployReply, JournalEntry } from '../schemas/release.js';
import type { Machine, MachineDrain } from '../schemas/cluster.js';
import type { Token, TokenCreate, TokenCreated } from '../schemas/token.js';
import type { ClusterUnit } from '../roles/orchestrator/cluster-view.js';

/** A typed client of the orchestrator API, sharing the server's schema types. */
export class OrchestratorClient {
  /** `token`: the API token sent as `Authorization: Bearer` (none: only local calls under --auth auto succeed). */
  constructor(
    readonly baseUrl: string,
    private readonly token?: string,
  ) {}

  private get headers(): Record<string, string> {
    return this.token ? { authorization: `Bearer ${this.token}` } : {};
  }

  private async call<T>(method: JsonMethod, path: string, body?: unknown): Promise<T> {
    const reply = await this.reach(() => requestJson(`${this.base}${path}`, method, body, 120_000, this.headers));
    if (reply.status >= 400) throw failure(reply.status, reply.body, reply.text);
    return reply.body as T;
  }

  private get base(): string {
    return this.baseUrl.replace(/\/$/, '');
  }

  /** Runs the request, naming the orchestrator when it cannot be reached at all. */
  private async reach<T>(attempt: () => Promise<T>): Promise<T> {
    try {
      return await attempt();
    } catch (error) {
      throw new Error(`orchestrator at ${this.baseUrl} is not answering: ${(error as Error).message}`, { cause: error });
    }
  }

  listServices = () => this.call<Service[]>('GET', '/services');
  getService = (name: string) => this.call<Service>('GET', `/services/${name}`);
  createService = (body: OrchestratorServiceCreate) => this.call<CreatedReply>('POST', '/services', body);
  deleteService = (name: string) => this.call<void>('DELETE', `/services/${name}`);
  patchNextConfig = (name: string, patch: ServiceConfigPatch) => this.call<ServiceConfig>('PATCH', `/services/${name}/config/next`, patch);
  deploy = (name: string, containerRepository?: string) =>
    this.call<DeployReply>('POST', `/services/${name}/deploy`, containerRepository ? { containerRepository } : {});
  rollback = (name: string, version: string) => this.call<DeployReply>('POST', `/services/${name}/rollback`, { version });
  deployments = (service?: string) => this.call<Deployment[]>('GET', `/deployments${service ? `?service=${encodeURIComponent(service)}` : ''}`);
  journal = (limit: number, service?: string) =>
    this.call<JournalEntry[]>('GET', `/journal?${new URLSearchParams({ limit: String(limit), ...(service ? { service } : {}) }).toString()}`);
  units = (service?: string) => this.call<ClusterUnit[]>('GET', service ? `/services/${service}/units` : '/cluster/units');
  machines = () => this.call<Machine[]>('GET', '/cluster/machines');
  drain = (machine: string, reason?: string) => this.call<MachineDrain>('PUT', `/cluster/machines/${encodeURIComponent(machine)}/drain`, reason ? { reason } : {});
  undrain = (machine: string) => this.call<void>('DELETE', `/cluster/machines/${encodeURIComponent(machine)}/drain`);
  createToken = (body: TokenCreate) => this.call<TokenCreated>('POST', '/tokens', body);
  bootstrapToken = () => this.call<TokenCreated>('POST', '/tokens/bootstrap');
  listTokens = () => this.call<Token[]>('GET', '/tokens');
  revokeToken = (name: string) => this.call<void>('DELETE', `/tokens/${encodeURIComponent(name)}`);

  /** A unit's container output, as a text stream (`follow` keeps it open, however long the unit is quiet). */
  async logs(service: string, unit: string, options: { tail: number; follow: boolean }): Promise<Readable> {
    const query = new URLSearchParams({ tail: String(options.tail), follow: String(options.follow) });
    const url = `${this.base}/services/${encodeURIComponent(service)}/units/${encodeURIComponent(unit)}/logs?${query.toString()}`;
    const response = await this.reach(() => request(url, { headersTimeout: 30_000, bodyTimeout: 0, headers: this.headers }));
    if (response.statusCode === 200) return response.body;
    const text = await response.body.text();
    throw failure(response.statusCode, parseOrText(text), text);
  }
}

/** An error reply as the CLI reports it: the status and the API's message. */
const failure = (status: number, body: unknown, text: string): Error => new Error(`${status}: ${messageOf(body) ?? text}`);
