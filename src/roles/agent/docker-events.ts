import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import { machineLabelFilters } from './container-spec.js';
import { dockerErrorMessage } from './docker-client.js';

// Docker's event stream tells the agent at once when one of its containers dies or starts, so a
// crashed unit is noticed without waiting for the periodic resync. The stream is only a hint:
// the agent re-reads the full state on every event, and re-subscribes when the stream ends.

export interface DockerEventWatch {
  close(): void;
}

export function watchContainerEvents(
  docker: Docker,
  machineId: string,
  onChange: () => void,
  log: FastifyBaseLogger,
  retryMs = 2_000,
): DockerEventWatch {
  let closed = false;
  let stream: (NodeJS.ReadableStream & { destroy?: () => void }) | undefined;
  let retryTimer: NodeJS.Timeout | undefined;

  const resubscribe = () => {
    stream = undefined;
    if (closed || retryTimer) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void subscribe();
    }, retryMs);
  };

  const subscribe = async () => {
    try {
      const events = await docker.getEvents({
        filters: { type: ['container'], event: ['start', 'die', 'destroy', 'oom'], label: machineLabelFilters(machineId) },
      });
      if (closed) {
        (events as { destroy?: () => void }).destroy?.();
        return;
      }
      stream = events;
      events.on('data', onChange);
      events.once('end', resubscribe);
      events.once('close', resubscribe);
      events.once('error', resubscribe);
      // Anything that happened while unsubscribed is picked up by a full reconcile.
      onChange();
    } catch (error) {
      log.debug({ reason: dockerErrorMessage(error) }, 'docker event stream unavailable; retrying');
      resubscribe();
    }
  };

  void subscribe();
  return {
    close() {
      closed = true;
      clearTimeout(retryTimer);
      stream?.destroy?.();
    },
  };
}
