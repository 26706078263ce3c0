import type { RoleServer } from '../../http/server.js';
import { badRequest, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { serviceKey } from '../../store/keys.js';
import { readRecord } from '../../store/json-records.js';
import { apiRoute } from '../../schemas/api.js';
import type { Service } from '../../schemas/service.js';
import { CertificateRefused, checkCertificate } from '../../certificates/certificate-check.js';
import { certificateFor, listCertificates, putCertificate, removeCertificate } from '../../certificates/certificate-records.js';

// Certificates from the operator (README "HTTPS"): add, list and remove need an admin token. A
// certificate is checked before it is stored; the reply and the journal name the host, never the key.

export function certificateRoutes(server: RoleServer, store: Store, domain: string): void {
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

  server.route({ ...apiRoute('GET /certificates'), handler: async () => listCertificates(store) });

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
      const declared = await readRecord<Service>(store, serviceKey(request.params.name));
      if (!declared) throw notFound(`service ${request.params.name} does not exist`);
      const host = `${request.params.name}.${domain}`;
      const publicFacing = declared.record.publicFacing && declared.record.loadBalanced;
      return { host, publicFacing, ...(publicFacing ? await certificateFor(store, host) : {}) };
    },
  });
}
