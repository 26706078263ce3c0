import { InvalidArgumentError, Option, type Command } from 'commander';
import type { OrchestratorClient } from './orchestrator-client.js';
import { table } from './table.js';
import { deliveryStates, notifyEventNames, type DeliveryState, type NotifyEventName } from '../schemas/notification-words.js';

// `platform notify …`: outbound notification endpoints and their deliveries (docs/notifications.md).

const print = (text: string) => process.stdout.write(text);

function eventList(value: string): NotifyEventName[] {
  const names = value.split(',').map((name) => name.trim()).filter(Boolean);
  const unknown = names.filter((name) => !(notifyEventNames as readonly string[]).includes(name));
  if (names.length === 0 || unknown.length > 0) throw new InvalidArgumentError(`${unknown.length ? `unknown event ${unknown.join(', ')}; ` : ''}events are ${notifyEventNames.join(', ')}.`);
  return [...new Set(names)] as NotifyEventName[];
}

const limit = (value: string): number => {
  if (!/^\d{1,4}$/.test(value)) throw new InvalidArgumentError('a whole number is needed.');
  return Number(value);
};

export function addNotifyCommands(notify: Command, client: (command: Command) => OrchestratorClient): void {
  notify
    .command('add <url>')
    .description('Register an endpoint that receives events as signed JSON POSTs; prints its signing secret, this once (admin).')
    .option('--services <glob>', 'only events of services matching this glob (e.g. web-*)')
    .option('--events <list>', `comma-separated; default every event: ${notifyEventNames.join(', ')}`, eventList)
    .action(async (url: string, options: { services?: string; events?: NotifyEventName[] }, command: Command) => {
      const reply = await client(command).addNotifyEndpoint({ url, ...(options.services ? { services: options.services } : {}), ...(options.events ? { events: options.events } : {}) });
      print(`${reply.secret}\n`);
      process.stderr.write(`endpoint ${reply.endpoint.id} added: the secret above signs each delivery (X-Platform-Signature-256) and is shown only now\n`);
    });

  notify.command('list').description('List endpoints (never their secrets).').action(async (_o, command: Command) => {
    const endpoints = await client(command).listNotifyEndpoints();
    print(table(['ID', 'URL', 'SERVICES', 'EVENTS', 'CREATED'], endpoints.map((e) => [e.id, e.url, e.services ?? '*', e.events?.join(',') ?? '*', e.createdAt])));
  });

  notify.command('remove <id>').description('Remove an endpoint; its pending deliveries are given up.').action(async (id: string, _o, command: Command) => {
    await client(command).removeNotifyEndpoint(id);
    print(`removed ${id}\n`);
  });

  notify
    .command('deliveries')
    .description('Recent deliveries, newest first, with the status and error of their last attempt.')
    .option('--limit <n>', 'at most this many (up to 1000)', limit, 50)
    .addOption(new Option('--state <state>', 'only deliveries in this state').choices(deliveryStates))
    .action(async (options: { limit: number; state?: DeliveryState }, command: Command) => {
      const deliveries = await client(command).notifyDeliveries(options.limit, options.state);
      print(
        table(
          ['CREATED', 'EVENT', 'SERVICE', 'ENDPOINT', 'STATE', 'ATTEMPTS', 'STATUS', 'ERROR'],
          deliveries.map((d) => [d.createdAt, d.event.event, d.event.service ?? '-', d.endpoint, d.state, String(d.attempts), d.statusCode === undefined ? '-' : String(d.statusCode), d.error ?? '']),
        ),
      );
    });
}
