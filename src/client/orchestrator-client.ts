import type { QuotaLimits } from '../schemas/quota.js';
import type { Readable } from 'node:stream';
import { messageOf, parseOrText, requestJson, sendRequest, textOf } from '../http/json-request.js';
import type { OrchestratorServiceCreate, ServiceConfigPatch } from '../schemas/service.js';
import type { ApiRequest, OrchestratorRoute, ReplyOf, RequestArgs } from '../schemas/api.js';
import { requestLine } from '../schemas/route-key.js';
import type { TokenCreate } from '../schemas/token.js';
import type { DeliveryState, NotifyEndpointCreate } from '../schemas/notification.js';
import type { CertificateAdd } from '../schemas/certificate.js';
import type { JobRequest } from '../schemas/job.js';

/** A typed client of the orchestrator API: each call names its route in the API table, which types it. */
export class OrchestratorClient {
  /** `token`: the API token sent as `Authorization: Bearer` (none: only local calls under --auth auto succeed). */
  constructor(
    readonly baseUrl: string,
    private readonly token?: string,
  ) {}

  private get headers(): Record<string, string> {
    return this.token ? { authorization: `Bearer ${this.token}` } : {};
  }

  private async call<K extends OrchestratorRoute>(route: K, ...[request]: RequestArgs<K>): Promise<ReplyOf<K>> {
    const { params, query, body } = (request ?? {}) as ApiRequest;
    const { method, path } = requestLine(route, params, query);
    const reply = await this.reach(() => requestJson(`${this.base}${path}`, method, body, 120_000, this.headers));
    if (reply.status >= 400) throw failure(reply.status, reply.body, reply.text);
    return reply.body as ReplyOf<K>;
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

  listServices = () => this.call('GET /services');
  getService = (name: string) => this.call('GET /services/:name', { params: { name } });
  createService = (body: OrchestratorServiceCreate) => this.call('POST /services', { body });
  deleteService = (name: string, options: { volumes?: boolean } = {}) =>
    this.call('DELETE /services/:name', { params: { name }, query: options.volumes ? { volumes: 'delete' } : {} });
  patchNextConfig = (name: string, patch: ServiceConfigPatch) => this.call('PATCH /services/:name/config/next', { params: { name }, body: patch });
  deploy = (name: string, containerRepository?: string) =>
    this.call('POST /services/:name/deploy', { params: { name }, body: containerRepository ? { containerRepository } : {} });
  rollback = (name: string, version: string, runReleaseCommand = false) =>
    this.call('POST /services/:name/rollback', { params: { name }, body: { version, ...(runReleaseCommand ? { runReleaseCommand } : {}) } });
  deployments = (service?: string) => this.call('GET /deployments', { query: { service } });
  journal = (limit: number, service?: string) => this.call('GET /journal', { query: { limit, service } });
  units = (service?: string) => (service ? this.call('GET /services/:name/units', { params: { name: service } }) : this.call('GET /cluster/units'));
  machines = () => this.call('GET /cluster/machines');
  versions = () => this.call('GET /cluster/versions');
  drain = (machine: string, reason?: string) => this.call('PUT /cluster/machines/:id/drain', { params: { id: machine }, body: reason ? { reason } : {} });
  undrain = (machine: string) => this.call('DELETE /cluster/machines/:id/drain', { params: { id: machine } });
  createToken = (body: TokenCreate) => this.call('POST /tokens', { body });
  bootstrapToken = () => this.call('POST /tokens/bootstrap');
  listTokens = () => this.call('GET /tokens');
  revokeToken = (name: string) => this.call('DELETE /tokens/:name', { params: { name } });
  addNotifyEndpoint = (body: NotifyEndpointCreate) => this.call('POST /notifications/endpoints', { body });
  listNotifyEndpoints = () => this.call('GET /notifications/endpoints');
  removeNotifyEndpoint = (id: string) => this.call('DELETE /notifications/endpoints/:id', { params: { id } });
  notifyDeliveries = (limit: number, state?: DeliveryState) => this.call('GET /notifications/deliveries', { query: { limit, state } });
  registryLogin = (host: string, username: string, password: string) => this.call('PUT /registries/:host', { params: { host }, body: { username, password } });
  registryLogins = () => this.call('GET /registries');
  registryLogout = (host: string) => this.call('DELETE /registries/:host', { params: { host } });
  setQuota = (services: string, limits: QuotaLimits) => this.call('PUT /quotas/:services', { params: { services }, body: limits });
  quotas = () => this.call('GET /quotas');
  removeQuota = (services: string) => this.call('DELETE /quotas/:services', { params: { services } });
  addCertificate = (body: CertificateAdd) => this.call('POST /certificates', { body });
  listCertificates = () => this.call('GET /certificates');
  removeCertificate = (host: string) => this.call('DELETE /certificates/:host', { params: { host } });
  serviceCertificate = (name: string) => this.call('GET /services/:name/certificate', { params: { name } });
  deployment = (id: string) => this.call('GET /deployments/:id', { params: { id } });
  release = (name: string, version: number) => this.call('GET /services/:name/config/history/:version', { params: { name, version: String(version) } });

  startJob = (name: string, body: JobRequest) => this.call('POST /services/:name/jobs', { params: { name }, body });
  jobs = (service?: string) => this.call('GET /jobs', { query: { service } });
  job = (name: string, id: string) => this.call('GET /services/:name/jobs/:id', { params: { name, id } });
  stopJob = (name: string, id: string) => this.call('DELETE /services/:name/jobs/:id', { params: { name, id } });

  /**
   * Passes `input` on to the stdin of a job started with `stdin`, as it comes; resolves once the
   * job's stdin is closed (the input ended, or the job did). Abort `signal` to leave before.
   */
  async sendJobStdin(name: string, id: string, input: Readable, signal: AbortSignal): Promise<void> {
    const { path } = requestLine('PUT /services/:name/jobs/:id/stdin', { name, id });
    // JOB_STDIN_TYPE of schemas/job.ts, not imported: the CLI loads no schema module to start.
    const headers = { ...this.headers, 'content-type': 'application/octet-stream' };
    const response = await this.reach(() => sendRequest(`${this.base}${path}`, { method: 'PUT', headers, body: input, idleTimeoutMs: 0, signal }));
    const text = await textOf(response);
    if (response.statusCode !== 204) throw failure(response.statusCode ?? 0, parseOrText(text), text);
  }

  /** A job's kept output, as a text stream (`follow`: until the job ends). */
  jobOutput(name: string, id: string, options: { tail: number; follow: boolean }): Promise<Readable> {
    return this.stream(requestLine('GET /services/:name/jobs/:id/output', { name, id }, options).path);
  }

  /** A unit's container output, as a text stream (`follow` keeps it open, however long the unit is quiet). */
  logs(service: string, unit: string, options: { tail: number; follow: boolean; previous?: boolean }): Promise<Readable> {
    return this.stream(requestLine('GET /services/:name/units/:unit/logs', { name: service, unit }, options).path);
  }

  /** GET /events: the cluster's event stream (a snapshot, then changes), open until `signal` aborts or the server ends it. */
  events(signal?: AbortSignal): Promise<Readable> {
    return this.stream(requestLine('GET /events').path, signal);
  }

  /** A reply read as it comes, with no body timeout: logs and events may be quiet for long. */
  private async stream(path: string, signal?: AbortSignal): Promise<Readable> {
    // The headers must come within 30 s; the body may then be quiet for as long as it likes.
    const response = await this.reach(() =>
      sendRequest(`${this.base}${path}`, { method: 'GET', headers: this.headers, idleTimeoutMs: 0, headersTimeoutMs: 30_000, ...(signal ? { signal } : {}) }),
    );
    if (response.statusCode === 200) return response;
    const text = await textOf(response);
    throw failure(response.statusCode ?? 0, parseOrText(text), text);
  }
}

/** An error reply as the CLI reports it: the status and the API's message. */
const failure = (status: number, body: unknown, text: string): Error => new ApiError(status, `${status}: ${messageOf(body) ?? text}`);

/** An error reply: its status tells a refusal (4xx, final) from an outage (5xx, worth trying again). */
export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
