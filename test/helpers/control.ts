/** A control listener (the issuer's API) over a store, on 127.0.0.1 port 0, for client tests. */
import type { AddressInfo } from 'node:net';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import type { Store } from '../../src/store/types.js';

export interface TestControl {
  url: string;
  issuer: Issuer;
  close(): Promise<void>;
}

export async function listenControl(store: Store): Promise<TestControl> {
  const metrics = createMetrics({ defaultMetrics: false });
  const issuer = new Issuer(store, metrics);
  const app = await buildControl({
    store,
    issuer,
    metrics,
    events: new EventLog(),
    defaultTtlMs: 10_000,
    logLevel: 'silent',
  });
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
