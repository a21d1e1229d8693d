// The baseline: a bare @fastify/http-proxy with no fencing, in front of the same upstream.
import Fastify from 'fastify';
import proxy from '@fastify/http-proxy';

const upstream = process.argv[2];
const app = Fastify({ logger: false });
await app.register(proxy, { upstream });
await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`listening http://127.0.0.1:${app.server.address().port}\n`);
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));
