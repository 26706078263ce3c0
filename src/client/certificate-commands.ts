import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { OrchestratorClient } from './orchestrator-client.js';
import { table } from './table.js';

// `platform cert add|list|remove`: the operator's certificates (docs/gateway.md "HTTPS"). The key file is
// read here and sent once to the orchestrator; nothing prints it.

const print = (text: string) => process.stdout.write(text);

/** `client` makes the API client from the global flags (src/client/commands.ts). */
export function addCertificateCommands(cert: Command, client: (command: Command) => OrchestratorClient): void {
  cert
    .command('add <host>')
    .description('Store a certificate for a host or a *.domain wildcard; every gateway serves it at once.')
    .requiredOption('--cert <file>', 'PEM certificate, then its intermediates')
    .requiredOption('--key <file>', 'its PEM private key (unencrypted)')
    .action(async (host: string, options: { cert: string; key: string }, command: Command) => {
      const added = await client(command).addCertificate({ host, certificate: readFileSync(options.cert, 'utf8'), key: readFileSync(options.key, 'utf8') });
      print(`${added.host}: ${added.names.join(', ')}, issued by ${added.issuer}, expires ${added.notAfter}\n`);
    });

  cert.command('list').description('List certificates: host, issuer, expiry, source, the routed hosts each serves (never a key).').action(async (_o, command: Command) => {
    const listed = await client(command).listCertificates();
    const acmeState = (entry: (typeof listed)[number]) =>
      entry.acme ? `${entry.acme.state}${entry.acme.error ? `: ${entry.acme.error}` : ''}${entry.acme.nextAttemptAt ? ` (next ${entry.acme.nextAttemptAt})` : ''}` : '-';
    print(
      table(
        ['HOST', 'ISSUER', 'EXPIRES', 'SOURCE', 'ACME', 'SERVING'],
        listed.map((entry) => [
          entry.host,
          entry.certificate?.issuer ?? '-',
          entry.certificate?.notAfter ?? '-',
          entry.certificate?.source ?? '-',
          acmeState(entry),
          // An operator's certificate whose services were deleted stays, serving nothing until one is declared again.
          entry.certificate ? (entry.serving.length > 0 ? entry.serving.join(',') : 'none') : '-',
        ]),
      ),
    );
  });

  cert.command('remove <host>').description("Remove a host's certificate (ACME orders its host again).").action(async (host: string, _o, command: Command) => {
    await client(command).removeCertificate(host);
    print(`removed the certificate of ${host}\n`);
  });
}
