import { payloadTooLarge } from '../../http/errors.js';
import type { Service } from '../../schemas/service.js';

// etcd refuses a request over 1.5 MiB, and a service's config is copied into each of its releases
// and (its env) into every assignment of its units: a record near that size would make deploys
// fail in the store. The per-field limits alone allow far more (1,000 variables of 64 KiB), so the
// record as stored is bounded too, well below etcd's limit.

// A config change rewrites the whole record, and etcd keeps every revision until it is compacted:
// at 512 KiB, 112 changes filled a 64 MiB quota in seconds. 128 KiB still holds hundreds of
// variables of a few hundred bytes, and each change costs a quarter as much store space.
export const MAX_SERVICE_RECORD_BYTES = 128 * 1024;

/** 413 naming the limit when `service` would be stored larger than MAX_SERVICE_RECORD_BYTES; else the bytes it takes. */
export function assertRecordSize(service: Service): number {
  const bytes = Buffer.byteLength(JSON.stringify(service));
  if (bytes > MAX_SERVICE_RECORD_BYTES) {
    throw payloadTooLarge(
      `service ${service.name} would be stored as ${Math.ceil(bytes / 1024)} KiB, over the limit of ${MAX_SERVICE_RECORD_BYTES / 1024} KiB for a service record (its config is copied into every release and assignment)`,
    );
  }
  return bytes;
}
