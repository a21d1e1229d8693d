/**
 * GET /v1/openapi.json: the control API's OpenAPI 3.1 document. One source: the file
 * docs/openapi.json (shipped in the package), read once and served as it is. Adding an
 * endpoint is one entry under its `paths`; a new problem code needs no edit there (every
 * operation answers its 4XX and 5XX with the one Problem schema, and the codes are the
 * catalogue of docs/errors.md). docs/client.md shows generating a client from it.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/** docs/openapi.json, from src/control/ and from dist/control/ alike. */
export const OPENAPI_FILE = new URL('../../docs/openapi.json', import.meta.url);

async function openapiRoute(app: FastifyInstance): Promise<void> {
  const text = readFileSync(OPENAPI_FILE, 'utf8');
  app.get('/v1/openapi.json', async (_request, reply) => reply.type('application/json').send(text));
}

export default fp(openapiRoute, { name: 'fencegate-openapi', fastify: '5.x' });
