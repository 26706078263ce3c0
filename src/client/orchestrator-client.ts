import { messageOf, requestJson, type JsonMethod } from '../http/json-request.js';
import type { CreatedReply, OrchestratorServiceCreate, Service, ServiceConfig, ServiceConfigPatch } from '../schemas/service.js';
import type { DeployReply } from '../schemas/release.js';
import type { Machine, MachineDrain } from '../schemas/cluster.js';
import type { ClusterUnit } from '../roles/orchestrator/cluster-view.js';

/** A typed client of the orchestrator API, sharing the server's schema types. */
export class OrchestratorClient {
  constructor(readonly baseUrl: string) {}

  private async call<T>(method: JsonMethod, path: string, body?: unknown): Promise<T> {
    let reply;
    try {
      reply = await requestJson(`${this.baseUrl.replace(/\/$/, '')}${path}`, method, body, 120_000);
    } catch (error) {
      throw new Error(`orchestrator at ${this.baseUrl} is not answering: ${(error as Error).message}`, { cause: error });
    }
    if (reply.status >= 400) throw new Error(`${reply.status}: ${messageOf(reply.body) ?? reply.text}`);
    return reply.body as T;
  }

  listServices = () => this.call<Service[]>('GET', '/services');
  getService = (name: string) => this.call<Service>('GET', `/services/${name}`);
  createService = (body: OrchestratorServiceCreate) => this.call<CreatedReply>('POST', '/services', body);
  deleteService = (name: string) => this.call<void>('DELETE', `/services/${name}`);
  patchNextConfig = (name: string, patch: ServiceConfigPatch) => this.call<ServiceConfig>('PATCH', `/services/${name}/config/next`, patch);
  deploy = (name: string, containerRepository?: string) =>
    this.call<DeployReply>('POST', `/services/${name}/deploy`, containerRepository ? { containerRepository } : {});
  units = (service?: string) => this.call<ClusterUnit[]>('GET', service ? `/services/${service}/units` : '/cluster/units');
  machines = () => this.call<Machine[]>('GET', '/cluster/machines');
  drain = (machine: string, reason?: string) => this.call<MachineDrain>('PUT', `/cluster/machines/${encodeURIComponent(machine)}/drain`, reason ? { reason } : {});
  undrain = (machine: string) => this.call<void>('DELETE', `/cluster/machines/${encodeURIComponent(machine)}/drain`);
}
