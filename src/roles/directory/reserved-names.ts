import { components } from '../../store/keys.js';

/** Component names: a service by one of these names would shadow the component's host name and key. */
export const reservedNames: ReadonlySet<string> = new Set<string>([...components, 'directory', 'agent', 'platform']);
