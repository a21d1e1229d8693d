/**
 * A TCP proxy on a loopback port whose target can be switched: what a stable endpoint in
 * front of a store does (a Sentinel-aware proxy, a DNS name, a load balancer) when the
 * store behind it is replaced. Switching drops the connections to the old target.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';

export interface TcpProxy {
  port: number;
  url(scheme: string): string;
  /** Points new connections at `port` and closes the open ones. */
  switchTo(port: number): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  let target = targetPort;
  const open = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    open.add(client);
    open.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return {
    port: address.port,
    url: (scheme) => `${scheme}://127.0.0.1:${address.port}`,
    switchTo(port) {
      target = port;
      for (const s of [...open]) s.destroy();
    },
    async close() {
      for (const s of [...open]) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}
