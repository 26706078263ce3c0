import { Type, type Static } from '@sinclair/typebox';
import { errorResponses } from './common.js';
import { ServiceGlob } from './token.js';

// Quotas (docs/cluster.md "Quotas"): what the services a glob matches may reserve together, checked by the
// directory whenever a declaration or a config change would reserve more.

const limits = {
  units: Type.Optional(Type.Integer({ minimum: 0, maximum: 100_000, description: 'units of every matching service together, 0 to 100000' })),
  memoryMB: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_073_741_824, description: 'megabytes every unit of the matching services declares, together' })),
  cpus: Type.Optional(Type.Number({ minimum: 0, maximum: 1_048_576, description: 'CPUs every unit of the matching services declares, together' })),
};

export const QuotaLimits = Type.Object(limits, { additionalProperties: false, minProperties: 1, description: 'units, memoryMB and/or cpus' });
export type QuotaLimits = Static<typeof QuotaLimits>;

export const Quota = Type.Object({ services: ServiceGlob, ...limits, setAt: Type.String({ format: 'date-time' }) }, { $id: 'Quota' });
export type Quota = Static<typeof Quota>;

export const QuotaParams = Type.Object({ services: ServiceGlob });

export const setQuotaSchema = {
  description:
    'Bound what the services matching the glob may reserve together (admin): units, memory and CPUs. A declaration or config change that would reserve more ' +
    'is refused with 403 naming the quota; one that reserves no more passes. Replaces an earlier quota of the glob.',
  params: QuotaParams,
  body: QuotaLimits,
  response: { 200: Quota, ...errorResponses },
};

export const listQuotasSchema = {
  description: 'Every quota: its glob and limits.',
  response: { 200: Type.Array(Quota), ...errorResponses },
};

export const removeQuotaSchema = {
  description: 'Remove the quota of a glob (admin).',
  params: QuotaParams,
  response: { 204: Type.Null(), ...errorResponses },
};
