// The words of notifications: the events an endpoint may receive and a delivery's states. Written
// once here, with no import, so the CLI reads them without the schemas' library (notification.ts
// builds its schemas from them).

export const notifyEventNames = [
  'deployment.started',
  'deployment.succeeded',
  'deployment.failed',
  'deployment.reverted',
  'deployment.superseded',
  'unit.failed',
  'machine.lost',
  'job.failed',
] as const;
export type NotifyEventName = (typeof notifyEventNames)[number];

export const deliveryStates = ['pending', 'delivered', 'failed'] as const;
export type DeliveryState = (typeof deliveryStates)[number];
