/**
 * Control listeners for tests, over a store, every answer checked against
 * docs/openapi.json (test/helpers/openapi.ts: a test file ends with
 * `expect(answerViolations()).toEqual([])`):
 * - `openTestControl(store)`: not listening (tests inject), over a store fixture it opens;
 * - `listenControl(store)`: on 127.0.0.1 port 0 over a store the test opened, for the client.
 */
import type { FastifyInstance } from 'fastify';
import type { AddressInfo } from 'node:net';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import type { Store } from '../../src/store/types.js';
import { checkAnswers } from './openapi.js';
import { STORE_FIXTURES, type Harness } from './stores.js';

type ControlOptions = Partial<Parameters<typeof buildControl>[0]>;

/** The control API over `store` with its own issuer, its answers checked. */
async function control(store: Store, options: ControlOptions) {
  const metrics = createMetrics({ defaultMetrics: false });
  const issuer = new Issuer(store, metrics);
  const app = checkAnswers(
    await buildControl({
      store,
      issuer,
      metrics,
      events: new EventLog(),
      defaultTtlMs: 10_000,
      logLevel: 'silent',
      ...options,
    }),
  );
  return { app, issuer };
}

export interface TestControl {
  app: FastifyInstance;
  issuer: Issuer;
  harness: Harness;
  close(): Promise<void>;
}

export async function openTestControl(
  store: 'embedded' | 'postgres' | 'redis' | 'etcd',
  options: ControlOptions = {},
): Promise<TestControl> {
  const harness = await STORE_FIXTURES.find((f) => f.name === store)!.open();
  const { app, issuer } = await control(harness.store, options);
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

export interface ListeningControl {
  url: string;
  issuer: Issuer;
  close(): Promise<void>;
}

export async function listenControl(store: Store, options: ControlOptions = {}): Promise<ListeningControl> {
  const { app, issuer } = await control(store, options);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    issuer,
    async close() {
      issuer.shutdown();
      await app.close();
    },
  };
}
