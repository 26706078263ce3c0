import type { RoleServer } from '../../http/server.js';
import { badRequest, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, servicePrefix, type Component } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import { readService } from '../../store/records/services.js';
import { apiRoute } from '../../schemas/api.js';
import type { Service } from '../../schemas/service.js';
import { CertificateRefused, checkCertificate } from '../../certificates/certificate-check.js';
import { certificateFor, listCertificates, putCertificate, removeCertificate } from '../../certificates/certificate-records.js';
import { publicHostNames } from '../gateway/tls/public-hosts.js';
import type { Domains } from '../../http/host-name.js';
import { listComponentVersions } from '../../store/records/component-versions.js';
import { whyNoCertificate } from '../../certificates/certificate-expectation.js';

// Certificates from the operator (docs/gateway.md "HTTPS"): add, list and remove need an admin token. A
// certificate is checked before it is stored; the reply and the journal name the host, never the key.

/**
 * The public hosts gateways route, by their rule (public-hosts.ts). Announced components count:
 * the orchestrator cannot tell whether gateways expose them (--expose-components).
 */
async function routedHosts(store: Store, domains: Domains): Promise<string[]> {
  const [services, announced] = await Promise.all([listRecords<Service>(store, servicePrefix), store.list(componentPrefix)]);
  const components = announced
    .map((kv) => ({ component: lastSegment(kv.key) as Component, address: kv.value }))
    .filter((entry) => componentNames.includes(entry.component));
  return publicHostNames(services, components, domains);
}

export function certificateRoutes(server: RoleServer, store: Store, domains: Domains, options: { singleMachine: boolean }): void {
  const { domain } = domains;
  server.route({
    ...apiRoute('POST /certificates'),
    handler: async (request, reply) => {
      const { host, certificate, key } = request.body;
      const now = Date.now();
      let listing;
      try {
        listing = checkCertificate(host, certificate, key, 'operator', now);
      } catch (error) {
        if (error instanceof CertificateRefused) throw badRequest(error.message);
        throw error;
      }
      await putCertificate(store, { ...listing, chain: certificate, key });
      return reply.status(201).send(listing);
    },
  });

  server.route({ ...apiRoute('GET /certificates'), handler: async () => listCertificates(store, await routedHosts(store, domains)) });

  server.route({
    ...apiRoute('DELETE /certificates/:host'),
    handler: async (request, reply) => {
      if (!(await removeCertificate(store, request.params.host))) throw notFound(`no certificate is stored for ${request.params.host}`);
      return reply.status(204).send(null);
    },
  });

  server.route({
    ...apiRoute('GET /services/:name/certificate'),
    handler: async (request) => {
      const declared = await readService(store, request.params.name);
      if (!declared) throw notFound(`service ${request.params.name} does not exist`);
      const { name } = request.params;
      const host = `${name}.${domain}`;
      const { loadBalanced } = declared.record;
      const publicFacing = declared.record.publicFacing && loadBalanced;
      if (!publicFacing) return { host, publicFacing, ...(loadBalanced ? { url: `http://${name}.${domains.internalDomain}/` } : {}) };
      const found = await certificateFor(store, host);
      if (found.certificate) return { host, publicFacing, url: `https://${host}/`, ...found };
      const gateways = (await listComponentVersions(store)).filter((component) => component.role === 'gateway');
      const why = whyNoCertificate(host, { domain, gateways: gateways.length, acmeGateways: gateways.filter((gateway) => gateway.acme).length, singleMachine: options.singleMachine });
      return { host, publicFacing, url: `http://${host}/`, ...found, ...(why === undefined ? {} : { noCertificateExpected: why }) };
    },
  });
}
