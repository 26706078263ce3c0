import { Type, type Static } from '@sinclair/typebox';

/** The store's layout version record (/platform/meta/schema), written by the scheduler leader's migration. */
export const StoreSchemaRecord = Type.Object(
  {
    version: Type.Integer({ minimum: 1, description: 'the store layout version (src/store/schema-version.ts)' }),
    migratedAt: Type.String({ format: 'date-time', description: 'when the store was migrated to this version' }),
    by: Type.String({ description: 'the platform version of the scheduler that migrated it' }),
  },
  { additionalProperties: false },
);
export type StoreSchemaRecord = Static<typeof StoreSchemaRecord>;
