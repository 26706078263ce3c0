import { Type, type Static } from '@sinclair/typebox';
import { ServiceName, UnitName } from './common.js';
import { UnitFailureKind } from './cluster.js';

/** How much of a failed unit's output is kept: the last lines, and no more than this many bytes of them. */
export const KEPT_OUTPUT_LINES = 100;
export const KEPT_OUTPUT_BYTES = 16 * 1024;

/**
 * The last output of a unit's container that failed (exited, was killed for memory, or could not
 * start), as its agent read it before the container was restarted or removed: the newest failure
 * of each unit instance, kept with the deployment it ran in (`platform logs NAME N --previous`).
 */
export const UnitOutput = Type.Object(
  {
    service: ServiceName,
    instance: Type.Integer({ minimum: 1 }),
    unit: UnitName,
    machine: Type.String(),
    /** The deployment and release the failed container ran. */
    deployment: Type.String(),
    release: Type.Integer(),
    image: Type.String(),
    /** None when the engine refused to create the container. */
    container: Type.Optional(Type.String({ description: 'the Docker container id' })),
    exitCode: Type.Optional(Type.Integer()),
    /** Why it stopped, for people (`exited with code 3`, `out of memory …`), and its kind for code. */
    error: Type.String(),
    errorKind: UnitFailureKind,
    /** When the agent saw it stop. */
    at: Type.String({ format: 'date-time' }),
    /**
     * Oldest first, each prefixed with Docker's timestamp; stdout and stderr interleaved. When the
     * engine refused to create or start the container, its error is the last line, marked
     * `[engine]` after the timestamp (src/roles/agent/failed-output.ts).
     */
    lines: Type.Array(Type.String(), { maxItems: KEPT_OUTPUT_LINES }),
    /** Set when older lines or the start of a long line were cut to stay within the bounds. */
    truncated: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type UnitOutput = Static<typeof UnitOutput>;
