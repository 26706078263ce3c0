import Fastify from 'fastify';

// The reference for the directory benchmark: a bare Fastify route answering the same JSON.
const body = JSON.parse(process.argv[2] ?? '{}') as unknown;
const port = Number(process.argv[3]);
const server = Fastify();
server.get('/services/:name', async () => body);
await server.listen({ host: '127.0.0.1', port });
process.stdout.write('ready\n');
