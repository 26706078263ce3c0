import { Type, type Static } from '@sinclair/typebox';

/**
 * A handover under way (`rollout.strategy: handover`): every gateway holds new requests for the
 * service until the record goes, or until `until`, whichever comes first.
 */
export const RequestHold = Type.Object(
  {
    service: Type.String(),
    /** The deployment replacing the unit. */
    deployment: Type.String(),
    /** The unit being handed over. */
    unit: Type.String(),
    since: Type.String({ format: 'date-time' }),
    /** When gateways stop holding even if the record is still there (a leader that died mid-handover). */
    until: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false },
);
export type RequestHold = Static<typeof RequestHold>;
