import t from 'tap';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Command } from 'commander';
import { addClientCommands } from '../../src/client/commands.js';

// `platform create`'s flags as an operator types them, parsed by the CLI's own commander program
// and sent to a listener standing in for the orchestrator: what reaches the API is the body.

interface Received {
  method: string;
  url: string;
  body: unknown;
}

async function readBody(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
}

/** Runs `platform <args>` against a listener that answers 201 and records each request. */
async function run(args: string[]): Promise<{ received: Received[]; error?: Error; output: string }> {
  const received: Received[] = [];
  const server = createServer((request, response) => {
    void readBody(request).then((body) => {
      received.push({ method: request.method!, url: request.url!, body });
      response.writeHead(201, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ meta: { name: 'shop', uuid: '00000000-0000-4000-8000-000000000000' } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const program = new Command('platform').exitOverride();
  let output = '';
  program.configureOutput({ writeErr: (text) => (output += text), writeOut: (text) => (output += text) });
  addClientCommands(program);
  for (const command of program.commands) command.exitOverride().configureOutput({ writeErr: (text) => (output += text), writeOut: (text) => (output += text) });
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((text: string) => ((output += text), true)) as typeof process.stdout.write;
  try {
    await program.parseAsync(['--orchestrator', url, ...args], { from: 'user' });
    return { received, output };
  } catch (error) {
    return { received, error: error as Error, output };
  } finally {
    process.stdout.write = write;
    server.close();
  }
}

t.test('--port is repeatable and sends each CONTAINER[:HOST] as a port mapping', async (t) => {
  const { received, error } = await run(['create', 'shop', '--image', '127.0.0.1:5000/shop:v1', '--port', '8080', '--port', '9090:19090']);
  t.equal(error, undefined, 'no crash');
  t.equal(received.length, 1);
  t.match(received[0], { method: 'POST', url: '/services' });
  t.same((received[0]!.body as { ports: unknown }).ports, [{ container: 8080 }, { container: 9090, host: 19090 }]);
});

t.test('without --port the service declares no ports', async (t) => {
  const { received, error } = await run(['create', 'shop', '--image', '127.0.0.1:5000/shop:v1']);
  t.equal(error, undefined);
  t.same((received[0]!.body as { ports: unknown }).ports, []);
});

t.test('a --port that is not CONTAINER[:HOST] is refused before anything is sent, naming the rule', async (t) => {
  for (const bad of ['http', '80:', ':80', '80:90:100', '8080/tcp']) {
    const { received, error, output } = await run(['create', 'shop', '--image', '127.0.0.1:5000/shop:v1', '--port', bad]);
    t.ok(error, `${bad} refused`);
    t.equal(received.length, 0, `${bad}: nothing sent`);
    t.match(output, /CONTAINER or CONTAINER:HOST/, `${bad}: the rule is named`);
  }
});
