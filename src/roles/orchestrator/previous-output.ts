import type { Store } from '../../store/store.js';
import { badRequest, notFound } from '../../http/errors.js';
import { readUnitOutput } from '../../store/records/unit-outputs.js';
import type { UnitOutput } from '../../schemas/unit-output.js';
import { instanceOf } from '../../units.js';

// `GET /services/:name/units/:unit/logs?previous=true`: the output kept of the unit's newest
// failed container (src/store/records/unit-outputs.ts), as text like the live log, after a line
// that says which run it was and how it ended.

/** The kept output of `unit` as text, its last `tail` lines; 404 naming why when none is kept. */
export async function previousOutputText(store: Store, service: string, unit: string, tail: number, follow: boolean): Promise<string> {
  if (follow) throw badRequest('previous and follow cannot be combined: the previous output of a unit does not grow');
  const instance = instanceOf(service, unit);
  if (instance === undefined) throw notFound(`${unit} is not a unit of service ${service}`);
  const output = await readUnitOutput(store, service, instance);
  if (!output) throw notFound(`no failed run of ${unit} is kept: its containers have not failed since the service was declared`);
  return describedOutput(output, tail);
}

/** The header line, then the last `tail` lines. */
export function describedOutput(output: UnitOutput, tail: number): string {
  const lines = tail === 0 ? [] : output.lines.slice(-tail);
  const cut = output.truncated ? ' (older output cut)' : '';
  const header =
    `-- previous run of ${output.unit}: ${output.error} at ${output.at}; deployment ${output.deployment}, release v${output.release}, ` +
    `machine ${output.machine}, ${output.container === undefined ? 'no container (the engine refused to create it)' : `container ${output.container.slice(0, 12)}`}; its last ${lines.length} lines${cut} --`;
  return [header, ...lines].join('\n') + '\n';
}
