/**
 * Store.watch across the processes that share one embedded store directory
 * (`fencegate serve --workers N`, or several gateways on one machine): LMDB has no
 * notifications, so each process listens on a Unix socket (`<dir>/wake/<pid>-<id>.sock`)
 * and the processes of a directory keep one connection per pair, over which each
 * sends the keys it changed once their transaction has committed.
 *
 * Why it loses no wake-up that matters: a process registers itself (peers table)
 * and then connects to every process registered before it, and `start` resolves only
 * once each of those acknowledged the connection (or after ACK_TIMEOUT_MS, for a
 * peer that is paused). So any watcher set up after start is known to every process
 * that can commit a change afterwards: the change's sender writes to it. Two
 * processes that start together both register before they read the table, so at
 * least one connects to the other. A connection that breaks, or a peer so far behind
 * that its buffer is full, is answered with "wake everything" (spurious wake-ups are
 * allowed by Store.watch; missed ones are not).
 *
 * Wire format: one line per message; `"key"` (a JSON string: keys cannot break the
 * framing) wakes that key's watchers, `*` wakes all, an empty line acknowledges a
 * new connection. Messages of one event-loop turn go out as one write per peer.
 * No polling anywhere: a process with no watchers just ignores what it receives.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, unlinkSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The longest Unix socket path that works everywhere (Linux allows 107 bytes, macOS 103). */
const MAX_SOCKET_PATH = 100;
/** How long start() waits for a peer to acknowledge (a paused peer must not block a start). */
const ACK_TIMEOUT_MS = 2000;
/** A peer with this much unsent data gets "wake everything" once it drains, instead of more keys. */
const MAX_BUFFERED = 1 << 20;

export interface Peer {
  pid: number;
  path: string;
}

export interface PeerRegistry {
  add(id: string, peer: Peer): Promise<void>;
  remove(id: string): Promise<void>;
  list(): [string, Peer][];
}

/** Called with a key, or null for "any key may have changed". */
export type Deliver = (key: string | null) => void;

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

function listen(server: net.Server, path: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

export class WakeMesh {
  private readonly sockets = new Set<net.Socket>();
  private readonly overflowed = new WeakSet<net.Socket>();
  private readonly pending = new Set<string>();
  private scheduled = false;
  private closed = false;
  /** Started on a disk that refused the registration (see start). */
  private unregistered = false;
  private registering = false;

  private constructor(
    private readonly server: net.Server,
    private readonly id: string,
    private readonly path: string,
    private readonly registry: PeerRegistry,
    private readonly deliver: Deliver,
  ) {}

  /**
   * Listens, registers, and connects to every registered peer (see above). When the
   * registration cannot be written and `deferrable` says why is passing (a full or
   * read-only disk: no process of the directory can commit a change meanwhile), the mesh
   * starts unregistered; register() then registers it, and wakes every watcher after.
   */
  static async start(
    dir: string,
    registry: PeerRegistry,
    deliver: Deliver,
    deferrable: (err: unknown) => Promise<boolean> = () => Promise.resolve(false),
  ): Promise<WakeMesh> {
    const wakeDir = join(dir, 'wake');
    const id = `${process.pid}-${randomBytes(4).toString('hex')}`;
    // Unix socket paths are limited to 107 bytes (Linux): a deep directory's socket goes to
    // the temporary directory instead; peers find it by the path registered. So does the
    // socket of a directory where none can be made (a read-only or full disk).
    const local = join(wakeDir, `${id}.sock`);
    const elsewhere = join(tmpdir(), `fencegate-wake-${id}.sock`);
    const server = net.createServer();
    let path = Buffer.byteLength(local) <= MAX_SOCKET_PATH ? local : elsewhere;
    try {
      if (path === local) mkdirSync(wakeDir, { recursive: true });
      await listen(server, path);
    } catch (err) {
      if (path === elsewhere) throw err;
      path = elsewhere;
      await listen(server, path);
    }
    const mesh = new WakeMesh(server, id, path, registry, deliver);
    server.on('connection', (s) => {
      mesh.adopt(s, null);
      s.write('\n');
    });
    server.unref();
    try {
      await mesh.join();
    } catch (err) {
      if (!(await deferrable(err))) {
        await mesh.close();
        throw err;
      }
      mesh.unregistered = true;
    }
    return mesh;
  }

  /** Registers this process and connects to every process registered before it. */
  private async join(): Promise<void> {
    await this.registry.add(this.id, { pid: process.pid, path: this.path });
    const others = this.registry.list().filter(([peerId]) => peerId !== this.id);
    await Promise.all(others.map(([peerId, peer]) => this.connect(peerId, peer)));
  }

  /**
   * Registers a mesh that started unregistered (see start); then wakes every watcher, for
   * the changes its peers committed without knowing it. Never rejects: a failure leaves it
   * unregistered for the next call.
   */
  async register(): Promise<void> {
    if (!this.unregistered || this.registering || this.closed) return;
    this.registering = true;
    try {
      await this.join();
      this.unregistered = false;
      this.deliver(null);
    } catch {
      // still unregistered: the next commit that succeeds calls again
    } finally {
      this.registering = false;
    }
  }

  /** Sends `keys` to every peer, once per event-loop turn. */
  notify(keys: readonly string[]): void {
    if (this.closed || keys.length === 0) return;
    for (const k of keys) this.pending.add(k);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    if (this.pending.size === 0 || this.closed) return;
    let msg = '';
    for (const k of this.pending) msg += `${JSON.stringify(k)}\n`;
    this.pending.clear();
    for (const s of this.sockets) {
      if (this.overflowed.has(s)) continue;
      if (s.writableLength > MAX_BUFFERED) {
        this.overflowed.add(s); // it gets "*" once it drains
        continue;
      }
      s.write(msg);
    }
  }

  private adopt(s: net.Socket, onAck: (() => void) | null): void {
    s.unref();
    s.setEncoding('utf8');
    this.sockets.add(s);
    let buf = '';
    s.on('data', (chunk: string) => {
      buf += chunk;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line === '') onAck?.();
        else if (line === '*') this.deliver(null);
        else this.deliverLine(line);
      }
    });
    s.on('drain', () => {
      if (this.overflowed.delete(s)) s.write('*\n');
    });
    s.on('error', () => undefined); // 'close' follows
    s.on('close', () => {
      this.sockets.delete(s);
      // What the peer sent before it broke may be lost: wake everything.
      if (!this.closed) this.deliver(null);
    });
  }

  private deliverLine(line: string): void {
    let key: unknown;
    try {
      key = JSON.parse(line);
    } catch {
      key = null;
    }
    this.deliver(typeof key === 'string' ? key : null);
  }

  /** Connects to a registered peer; forgets it when it is gone for good. Never rejects. */
  private connect(peerId: string, peer: Peer): Promise<void> {
    return new Promise((resolve) => {
      const s = net.createConnection(peer.path);
      const timer = setTimeout(done, ACK_TIMEOUT_MS);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      s.once('connect', () => this.adopt(s, done));
      s.once('error', () => {
        done();
        if (!this.sockets.has(s) && !pidAlive(peer.pid)) {
          unlinkQuietly(peer.path);
          void this.registry.remove(peerId).catch(() => undefined);
        }
      });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    unlinkQuietly(this.path);
    await this.registry.remove(this.id).catch(() => undefined);
  }
}
