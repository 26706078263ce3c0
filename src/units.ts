import type { UnitStatus } from './schemas/cluster.js';

/** `<service>-<instance>.service`, the unit's name and its container's name. */
export const unitName = (service: string, instance: number): string => `${service}-${instance}.service`;

/** Green in the dashboard: the unit runs. */
export const isRunning = (status: Pick<UnitStatus, 'active' | 'sub'>): boolean => status.active === 'active' && status.sub === 'running';
