/**
 * Notifications over Redis pub/sub: one dedicated subscriber connection per store
 * (a duplicate of the command connection, opened on the first watch), one channel per
 * lock key, subscribed while at least one listener wants it.
 *
 * SUBSCRIBE/UNSUBSCRIBE calls go through one promise chain, so they reach Redis in the
 * order they were asked for (an unsubscribe can never overtake a later re-subscribe).
 * After a reconnect ioredis re-subscribes by itself; since messages published while the
 * connection was down are lost, every listener is then called once (a spurious wake-up,
 * which the Store contract allows) so waiters re-check the state.
 */
import type { Cluster, Redis } from 'ioredis';
import { StoreUnavailableError } from '../../errors.js';
import { type Connection, duplicateConnection, unavailable } from './connection.js';

interface Channel {
  listeners: Set<() => void>;
  /** Settles when SUBSCRIBE was acknowledged (or failed). */
  ready: Promise<void>;
}

export class Watcher {
  private sub: Connection | null = null;
  private subConnected: Promise<void> | null = null;
  private readonly channels = new Map<string, Channel>();
  private chain: Promise<unknown> = Promise.resolve();
  private wasReady = false;
  private closed = false;

  constructor(private readonly main: Connection) {}

  /** Calls listener on every message of `channel`; resolves once subscribed. */
  async watch(channel: string, listener: () => void): Promise<() => void> {
    if (this.closed) throw new StoreUnavailableError('redis store is closed');
    let entry = this.channels.get(channel);
    if (entry === undefined) {
      const created: Channel = {
        listeners: new Set(),
        ready: this.serial(async () => {
          const client = await this.subscriber();
          await client.subscribe(channel);
        }),
      };
      // A failed subscription is forgotten, so the next watch tries again.
      created.ready.catch(() => {
        if (this.channels.get(channel) === created) this.channels.delete(channel);
      });
      this.channels.set(channel, created);
      entry = created;
    }
    // A distinct wrapper per call, so the same function can be registered twice.
    const own = (): void => listener();
    entry.listeners.add(own);
    try {
      await entry.ready;
    } catch (err) {
      entry.listeners.delete(own);
      throw unavailable(this.connection(), 'watch', err);
    }
    let active = true;
    const current = entry;
    return () => {
      if (!active) return;
      active = false;
      current.listeners.delete(own);
      if (current.listeners.size > 0 || this.channels.get(channel) !== current) return;
      this.channels.delete(channel);
      void this.serial(async () => {
        if (this.channels.has(channel) || this.sub === null) return; // wanted again meanwhile
        await this.sub.client.unsubscribe(channel);
      }).catch(() => undefined); // a lost connection drops the subscription anyway
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.channels.clear();
    const sub = this.sub;
    if (sub === null) return;
    await this.subConnected?.catch(() => undefined);
    try {
      await sub.client.quit();
    } catch {
      sub.client.disconnect();
    }
  }

  private serial<T>(op: () => Promise<T>): Promise<T> {
    const next = this.chain.then(op, op);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private connection(): Connection {
    if (this.sub === null) this.sub = this.makeSubscriber();
    return this.sub;
  }

  private makeSubscriber(): Connection {
    const conn = duplicateConnection(this.main, { connectionName: 'fencegate-watch' });
    conn.client.on('message', (channel: string) => this.dispatch(channel));
    conn.client.on('ready', () => {
      if (this.wasReady) for (const ch of this.channels.keys()) this.dispatch(ch);
      this.wasReady = true;
    });
    // A cluster's subscriber moves to another node when its node is lost (ioredis
    // re-subscribes): messages published meanwhile are lost, so every listener is woken.
    const wakeAll = (): void => {
      for (const ch of this.channels.keys()) this.dispatch(ch);
    };
    conn.client.on('-node', wakeAll);
    conn.client.on('+node', wakeAll);
    return conn;
  }

  private async subscriber(): Promise<Redis | Cluster> {
    const conn = this.connection();
    // One connect attempt; if it fails, ioredis keeps reconnecting in the background and
    // SUBSCRIBE fails fast (no offline queue) until it is back.
    this.subConnected ??= conn.client.connect().catch(() => undefined);
    await this.subConnected;
    return conn.client;
  }

  private dispatch(channel: string): void {
    const entry = this.channels.get(channel);
    if (entry === undefined) return;
    for (const listener of [...entry.listeners]) {
      try {
        listener();
      } catch {
        // A listener's failure must not stop the others from being woken.
      }
    }
  }
}
