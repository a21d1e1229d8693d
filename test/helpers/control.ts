/**
 * A control listener (not listening: tests inject) over a store fixture, with its issuer,
 * every answer checked against docs/openapi.json (test/helpers/openapi.ts).
 */
import type { FastifyInstance } from 'fastify';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { checkAnswers } from './openapi.js';
import { STORE_FIXTURES, type Harness } from './stores.js';

export interface TestControl {
  app: FastifyInstance;
  issuer: Issuer;
  harness: Harness;
  close(): Promise<void>;
}

export async function openTestControl(
  store: 'embedded' | 'postgres' | 'redis',
  options: Partial<Parameters<typeof buildControl>[0]> = {},
): Promise<TestControl> {
  const harness = await STORE_FIXTURES.find((f) => f.name === store)!.open();
  const metrics = createMetrics({ defaultMetrics: false });
  const issuer = new Issuer(harness.store, metrics);
  const app = checkAnswers(
    await buildControl({
      store: harness.store,
      issuer,
      metrics,
      events: new EventLog(),
      defaultTtlMs: 10_000,
      logLevel: 'silent',
      ...options,
    }),
  );
  return {
    app,
    issuer,
    harness,
    async close() {
      issuer.shutdown();
      await app.close();
      await harness.close();
    },
  };
}
