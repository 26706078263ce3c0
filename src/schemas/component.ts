import { Type, type Static } from '@sinclair/typebox';

/** One running role of one process (/platform/components/<role>/<machine>@<address>, leased): what `platform version` lists. */
export const ComponentVersion = Type.Object({
  role: Type.String({ description: 'directory, scheduler, orchestrator, agent, gateway or web' }),
  machine: Type.String({ description: 'the machine id of the process (--machine-id)' }),
  address: Type.String({ description: 'host:port the role answers at' }),
  version: Type.String({ description: 'the platform version the process runs' }),
  startedAt: Type.String({ format: 'date-time' }),
  acme: Type.Optional(Type.Boolean({ description: 'gateways: whether it orders certificates from ACME (--acme-email)' })),
});
export type ComponentVersion = Static<typeof ComponentVersion>;

export const VersionsReply = Type.Object({
  storeSchema: Type.Integer({ minimum: 0, description: 'the store layout version (/platform/meta/schema; 0 before 0.2.0 migrated it)' }),
  components: Type.Array(ComponentVersion, { description: 'every running role, by role then machine' }),
});
export type VersionsReply = Static<typeof VersionsReply>;
