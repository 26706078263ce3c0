// The version of the store's layout: the key families of keys.ts and the records' shapes under
// them. A change that needs existing records rewritten raises it; backups carry it, and restore
// refuses a backup with a newer one than this program knows (the later migrations start here).

export const STORE_SCHEMA_VERSION = 1;
