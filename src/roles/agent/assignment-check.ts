import type { FastifyBaseLogger } from 'fastify';
import type { ErrorObject } from 'ajv';
import { Assignment, UnitSlot } from '../../schemas/cluster.js';
import { buildAjv } from '../../http/server.js';
import { validatorOnFirstUse } from '../../http/schema-compilers.js';
import { describeValidation } from '../../http/errors.js';
import type { KeyValue } from '../../store/store.js';

// Whoever can write the store can assign anything, so the agent runs only what a declaration could
// have asked for: an assignment that does not match the closed Assignment schema is refused, and
// one that names a privilege (privileged mode, host paths, host namespaces, capabilities) says so.
// The container spec ignores such fields anyway; refusing them makes the attempt seen, not silent.

/** An assignment the agent will not run, with why, and its slot when it names one well enough to report on. */
export interface RefusedAssignment {
  key: string;
  refusal: string;
  slot?: UnitSlot;
}

export interface CheckedAssignments {
  accepted: Assignment[];
  refused: RefusedAssignment[];
}

/** Field names (lower case, letters only) that ask for more than a unit may have, and what they ask for. */
const privilegeFields: Record<string, string> = {
  privileged: 'privileged mode',
  binds: 'host paths',
  mounts: 'host paths',
  volumes: 'host paths',
  volumesfrom: 'host paths',
  hostpath: 'host paths',
  pidmode: "the host's PID namespace",
  hostpid: "the host's PID namespace",
  ipcmode: "the host's IPC namespace",
  hostipc: "the host's IPC namespace",
  usernsmode: "the host's user namespace",
  cgroupnsmode: "the host's cgroup namespace",
  cgroupparent: 'a host cgroup',
  networkmode: 'a network mode',
  hostnetwork: 'a network mode',
  capadd: 'added capabilities',
  capabilities: 'added capabilities',
  devices: 'host devices',
  devicerequests: 'host devices',
  devicecgrouprules: 'host devices',
  securityopt: 'security options',
  hostconfig: 'Docker host settings',
};

const ajv = buildAjv(false);
// Compiled on the first assignment, not at start (issue 29: an agent without units compiles nothing).
const isAssignment = validatorOnFirstUse<Assignment>(ajv, Assignment);
const namesSlot = validatorOnFirstUse<UnitSlot>(ajv, UnitSlot);

const unknownFields = (errors: ErrorObject[]): string[] =>
  errors.filter((error) => error.keyword === 'additionalProperties').map((error) => String(error.params.additionalProperty));

/** Why the record cannot run, or undefined when it is an assignment a declaration could have made. */
export function refusalOf(record: unknown): string | undefined {
  if (isAssignment(record)) return undefined;
  const errors = isAssignment.errors ?? [];
  const asked = [...new Set(unknownFields(errors).map((field) => privilegeFields[field.toLowerCase().replace(/[^a-z]/g, '')]))].filter(Boolean);
  if (asked.length > 0) return `assignment refused: it asks for ${asked.join(' and ')}, which no declaration can`;
  return `assignment refused: ${describeValidation(errors, 'assignment')}`;
}

/** Sorts the records under this machine's assignment prefix into those it runs and those it refuses (logged once each). */
export class AssignmentCheck {
  private logged = new Map<string, string>();

  /** `platformPorts`: ports the platform's roles listen on besides PLATFORM_PORTS (the schema refuses those), asked at each check. */
  constructor(
    private readonly log: FastifyBaseLogger,
    private readonly platformPorts: () => readonly number[] = () => [],
  ) {}

  check(records: KeyValue[]): CheckedAssignments {
    const checked: CheckedAssignments = { accepted: [], refused: [] };
    for (const { key, value } of records) {
      const record = parse(value);
      const refusal = record === undefined ? 'assignment refused: it is not JSON' : (refusalOf(record) ?? this.platformPortRefusal(record as Assignment));
      if (refusal === undefined) checked.accepted.push(record as Assignment);
      else checked.refused.push({ key, refusal, ...(namesSlot(record) ? { slot: record } : {}) });
    }
    this.logChanges(checked.refused);
    return checked;
  }

  private platformPortRefusal(assignment: Assignment): string | undefined {
    const platformPorts = this.platformPorts();
    const taken = assignment.ports.find((mapping) => mapping.host !== undefined && platformPorts.includes(mapping.host));
    return taken ? `assignment refused: host port ${taken.host} is one the platform listens on` : undefined;
  }

  private logChanges(refused: RefusedAssignment[]): void {
    const current = new Map(refused.map((entry) => [entry.key, entry.refusal]));
    for (const [key, refusal] of current) {
      if (this.logged.get(key) !== refusal) this.log.warn({ key, reason: refusal }, 'assignment refused');
    }
    this.logged = current;
  }
}

function parse(value: string): unknown {
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return undefined;
  }
}
