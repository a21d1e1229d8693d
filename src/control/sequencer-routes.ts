/**
 * `GET /v1/keys` on the control listener: the public keys sequencers are verified with,
 * as a JWKS (RFC 7517; Ed25519 as RFC 8037 OKP keys). Every accepted key is listed: the
 * next key before it signs, the current one, and retired ones until pruned. Gateways do
 * not fetch this per request (they read the key file); it is for other verifiers.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { KeyRing } from '../sequencer/keyring.js';

async function keysRoutes(app: FastifyInstance, opts: { keys: KeyRing | null }): Promise<void> {
  app.get('/v1/keys', async (_req, reply) => {
    reply.header('cache-control', 'no-cache');
    return opts.keys === null ? { keys: [] } : opts.keys.jwks();
  });
}

export default fp(keysRoutes, { name: 'fencegate-keys', fastify: '5.x' });
