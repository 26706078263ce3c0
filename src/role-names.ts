import type { Component } from './store/keys.js';
import { ConfigError } from './config-error.js';

// The roles, their default ports and announcement names: what the CLI's command definitions and
// the systemd renderer need without the rest of config.ts (which loads the schemas, the access
// rules and the store's metrics: most of a client command's start-up otherwise).

export const roles = ['directory', 'scheduler', 'orchestrator', 'agent', 'gateway', 'web'] as const;
export type Role = (typeof roles)[number];

export const defaultPorts: Record<Role, number> = { orchestrator: 9000, directory: 9001, scheduler: 9002, agent: 9003, gateway: 8080, web: 9004 };

/** The announcement name of each role (the specification names the directory `service-directory`). */
export const announcedAs: Record<Role, Component | undefined> = {
  directory: 'service-directory',
  scheduler: 'scheduler',
  orchestrator: 'orchestrator',
  gateway: 'gateway',
  web: 'web',
  // Agents register their machine instead (under /platform/machines/).
  agent: undefined,
};

export function parseRoles(text: string): Role[] {
  const names = text.split(',').map((name) => name.trim()).filter(Boolean);
  if (names.length === 0) throw new ConfigError('--role needs at least one role');
  for (const name of names) {
    if (!(roles as readonly string[]).includes(name)) throw new ConfigError(`--role: unknown role ${name} (roles: ${roles.join(', ')})`);
  }
  return [...new Set(names)] as Role[];
}
