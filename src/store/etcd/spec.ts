/**
 * `--store etcd://host:2379[,host:2379…]`: the members of one etcd v3 cluster, reached
 * over plain gRPC (the client fails over between them); `etcds://` reaches them over TLS
 * (the CA and client certificate come from --store-ca / --store-cert, not the URL).
 * Optional `user:password@` for etcd's own authentication.
 */
export interface EtcdSpec {
  /** `http://host:port` (`https://` for etcds://), one per member named. */
  hosts: string[];
  tls: boolean;
  auth: { username: string; password: string } | null;
}

const HOST = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

/** The parsed spec, or a sentence saying what is wrong with it. */
export function parseEtcdSpec(spec: string): EtcdSpec | string {
  const m = /^etcd(s?):\/\/(?:([^@/]*)@)?([^/?#]*)\/?$/i.exec(spec);
  if (m === null)
    return 'an etcd store is etcd://host:port[,host:port…] or etcds:// for TLS (no path, query or fragment)';
  const tls = m[1] !== '';
  const hosts: string[] = [];
  for (const part of (m[3] ?? '').split(',')) {
    const h = HOST.exec(part.trim());
    const port = Number(h?.[2]);
    if (h === null || !(port >= 1 && port <= 65535)) {
      return `"${part}" is not host:port (each etcd member is named with its client port, e.g. 127.0.0.1:2379)`;
    }
    hosts.push(`${tls ? 'https' : 'http'}://${h[1]}:${port}`);
  }
  let auth: EtcdSpec['auth'] = null;
  const user = m[2];
  if (user !== undefined) {
    const colon = user.indexOf(':');
    if (colon <= 0) return 'etcd credentials are user:password@';
    auth = {
      username: decodeURIComponent(user.slice(0, colon)),
      password: decodeURIComponent(user.slice(colon + 1)),
    };
  }
  return { hosts, tls, auth };
}
