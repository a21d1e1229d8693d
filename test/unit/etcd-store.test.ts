/** The etcd store's pure parts: the --store spec and the identity check (docs/adr/0020-etcd-store.md). */
import { describe, expect, it } from 'vitest';
import { CommitBatcher } from '../../src/store/etcd/batch.js';
import { ClusterIdentity, IdentityChanged } from '../../src/store/etcd/identity.js';
import { prefixEnd } from '../../src/store/etcd/keys.js';
import { parseEtcdSpec } from '../../src/store/etcd/spec.js';

const header = (cluster: string, revision: number) => ({
  cluster_id: cluster,
  member_id: 'm1',
  revision: String(revision),
  raft_term: '2',
});

describe('etcd spec', () => {
  it('names every member with its client port, and optional credentials', () => {
    expect(parseEtcdSpec('etcd://a:2379,10.0.0.2:2379,[::1]:2380')).toEqual({
      hosts: ['http://a:2379', 'http://10.0.0.2:2379', 'http://[::1]:2380'],
      tls: false,
      auth: null,
    });
    expect(parseEtcdSpec('etcd://fg:p%40ss@a:2379')).toEqual({
      hosts: ['http://a:2379'],
      tls: false,
      auth: { username: 'fg', password: 'p@ss' },
    });
  });
  it('etcds:// reaches every member over TLS', () => {
    expect(parseEtcdSpec('ETCDS://fg:pw@a:2379,b:2379')).toEqual({
      hosts: ['https://a:2379', 'https://b:2379'],
      tls: true,
      auth: { username: 'fg', password: 'pw' },
    });
    expect(parseEtcdSpec('etcds://a')).toMatch(/"a" is not host:port/);
  });
  it('says what is wrong', () => {
    expect(parseEtcdSpec('etcd://a')).toMatch(/"a" is not host:port/);
    expect(parseEtcdSpec('etcd://a:0')).toMatch(/"a:0" is not host:port/);
    expect(parseEtcdSpec('etcd://a:2379/x')).toMatch(/no path/);
    expect(parseEtcdSpec('etcd://fg@a:2379')).toMatch(/user:password@/);
  });
});

describe('etcd identity check', () => {
  it('accepts an answer older than one that overlapped it, never one older than what was seen before it was sent', () => {
    const id = new ClusterIdentity();
    id.check(header('c1', 10), id.floor());
    const sentAt = id.floor(); // 10
    id.check(header('c1', 15), id.floor()); // a commit answered meanwhile
    expect(() => id.check(header('c1', 12), sentAt)).not.toThrow(); // overlapped the commit
    expect(() => id.check(header('c1', 9), sentAt)).toThrow(IdentityChanged);
    expect(id.changed).toMatch(/revision went back from 10 to 9/);
    // Stays changed (every answer refused) until the epoch was raised on the new state.
    expect(() => id.check(header('c1', 20), id.floor())).toThrow(IdentityChanged);
    id.verified(header('c1', 3));
    expect(() => id.check(header('c1', 4), id.floor())).not.toThrow();
  });
  it('another cluster id is a change', () => {
    const id = new ClusterIdentity();
    id.check(header('c1', 10), id.floor());
    expect(() => id.check(header('c2', 11), id.floor())).toThrow(
      /another etcd cluster answers \(cluster id c2, was c1\)/,
    );
  });
  it('prefixEnd is the first key after a prefix', () => {
    expect(prefixEnd('ns/locks/').toString()).toBe('ns/locks0');
  });
});

describe('etcd commit batches', () => {
  type Req = import('etcd3').ITxnRequest;
  const header = { cluster_id: 'c', member_id: 'm', revision: '7', raft_term: '1' };
  function fakeKv() {
    const sent: Req[] = [];
    const kv = {
      txn: (req: Req) => {
        sent.push(req);
        const nested = (req.success ?? []).filter((op) => op.request_txn !== undefined);
        const responses = nested.map((op, i) => ({
          response_txn: { header, succeeded: i % 2 === 0, responses: [], marker: op },
        }));
        return Promise.resolve({ header, succeeded: true, responses });
      },
    };
    return { kv: kv as unknown as import('etcd3').KVClient, sent };
  }
  const op = (key: string): Req => ({ success: [{ request_put: { key: Buffer.from(key) } }] });

  it("sends one turn's commits as nested txns of one, each answered on its own", async () => {
    const { kv, sent } = fakeKv();
    const b = new CommitBatcher(kv);
    const replies = await Promise.all([b.commit(op('a'), new Set(['a'])), b.commit(op('b'), new Set(['b']))]);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.success?.map((o) => o.request_txn?.success?.[0]?.request_put?.key?.toString())).toEqual([
      'a',
      'b',
    ]);
    expect(replies.map((r) => r.succeeded)).toEqual([true, false]);
  });

  it('puts a commit that writes a key another one of the turn writes into the next turn (etcd refuses a key put twice)', async () => {
    const { kv, sent } = fakeKv();
    const b = new CommitBatcher(kv);
    await Promise.all([
      b.commit(op('a'), new Set(['a', 'w'])),
      b.commit(op('b'), new Set(['b', 'w'])),
      b.commit(op('c'), new Set(['c'])),
    ]);
    expect(sent).toHaveLength(2);
    expect(sent[0]?.success).toHaveLength(2); // a and c
    expect(sent[1]?.success?.[0]?.request_put?.key?.toString()).toBe('b'); // alone: sent as it is
  });
});
