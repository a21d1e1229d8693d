/**
 * A whole server (startServer, in-process) for integration tests: the shared Redis as
 * its lock store under a key prefix of its own (removed on close), port-0 listeners, the
 * given policies, no log output.
 */
import { DEFAULTS, type ServeConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/serve.js';
import { deleteRedisPrefix, REDIS_URL, uniqueName } from './stores.js';

export interface TestServer {
  readonly srv: RunningServer;
  /** Its Redis key prefix. */
  readonly namespace: string;
  /** Closes the server and deletes its keys. */
  close(): Promise<void>;
}

export async function startRedisServerWith(policies: string, prefix: string): Promise<TestServer> {
  const namespace = uniqueName(prefix);
  const config: ServeConfig = {
    ...DEFAULTS,
    store: REDIS_URL,
    storeNamespace: namespace,
    allowVolatileRedis: true,
    listen: { host: '127.0.0.1', port: 0 },
    control: { host: '127.0.0.1', port: 0 },
    policies,
    logLevel: 'silent',
  };
  const srv = await startServer(config);
  return {
    srv,
    namespace,
    async close() {
      await srv.close();
      await deleteRedisPrefix(REDIS_URL, namespace);
    },
  };
}
