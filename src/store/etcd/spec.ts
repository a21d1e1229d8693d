/**
 * `--store etcd://host:2379[,host:2379…]`: the members of one etcd v3 cluster, reached
 * over plain gRPC (the client fails over between them). Optional `user:password@` for
 * etcd's own authentication. TLS (`etcds://`) is not offered yet: refused by name.
 */
export interface EtcdSpec {
  /** `http://host:port`, one per member named. */
  hosts: string[];
  auth: { username: string; password: string } | null;
}

const HOST = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

/** The parsed spec, or a sentence saying what is wrong with it. */
export function parseEtcdSpec(spec: string): EtcdSpec | string {
  const m = /^etcd:\/\/(?:([^@/]*)@)?([^/?#]*)\/?$/i.exec(spec);
  if (m === null) return 'an etcd store is etcd://host:port[,host:port…] (no path, query or fragment)';
  const hosts: string[] = [];
  for (const part of (m[2] ?? '').split(',')) {
    const h = HOST.exec(part.trim());
    const port = Number(h?.[2]);
    if (h === null || !(port >= 1 && port <= 65535)) {
      return `"${part}" is not host:port (each etcd member is named with its client port, e.g. 127.0.0.1:2379)`;
    }
    hosts.push(`http://${h[1]}:${port}`);
  }
  let auth: EtcdSpec['auth'] = null;
  if (m[1] !== undefined) {
    const colon = m[1].indexOf(':');
    if (colon <= 0) return 'etcd credentials are user:password@';
    auth = {
      username: decodeURIComponent(m[1].slice(0, colon)),
      password: decodeURIComponent(m[1].slice(colon + 1)),
    };
  }
  return { hosts, auth };
}
