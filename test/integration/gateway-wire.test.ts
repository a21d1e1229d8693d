/**
 * The gateway on the wire, with raw sockets: header bytes that are UTF-8 (Node reads
 * them as latin1), `Expect: 100-continue` (no 100 before the fence decided), and the
 * requests node:http hands to other events than 'request' (CONNECT, Upgrade, bytes its
 * parser refuses), answered as problems with the refusal lane on and off.
 */
import { connect, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/types.js';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';

/** A raw connection that collects what the server sends (as latin1, byte per char). */
class Wire {
  received = '';
  closed = false;
  private readonly socket: Socket;
  private waiters: (() => void)[] = [];

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1');
    this.socket.on('data', (d: Buffer) => {
      this.received += d.toString('latin1');
      this.wake();
    });
    this.socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    this.socket.on('error', () => undefined);
  }

  write(data: string | Buffer): void {
    if (!this.socket.destroyed) this.socket.write(data);
  }

  /** Waits until `test` holds for what was received (or the socket closed, or `ms` passed). */
  async until(test: (received: string) => boolean, ms = 3000): Promise<string> {
    const deadline = Date.now() + ms;
    while (!test(this.received) && !this.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.received;
  }

  end(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}

/** Status codes of every response head received, in order (100s included). */
function statuses(received: string): number[] {
  return [...received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
}

const finalResponse = (r: string) => statuses(r).some((s) => s >= 200);

describe('gateway on the wire', () => {
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeEach(async () => {
    store = new MemoryStore();
    upstream = await startUpstream();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
  });

  afterEach(async () => {
    await gw.close();
    await upstream.close();
  });

  describe('header-based lock keys are UTF-8', () => {
    /** PUT /tenants/items/1 with x-tenant given as raw bytes. */
    async function put(tenant: Buffer, token: bigint | string): Promise<string> {
      const wire = new Wire(gw.port);
      wire.write(
        Buffer.concat([
          Buffer.from('PUT /tenants/items/1 HTTP/1.1\r\nHost: x\r\nx-tenant: ', 'latin1'),
          tenant,
          Buffer.from(`\r\nFencing-Token: ${token}\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx`),
        ]),
      );
      const out = await wire.until(finalResponse);
      wire.end();
      return out;
    }

    it('a UTF-8 header value renders the lock as the text it encodes', async () => {
      const lease = await mint(store, 'tenant:é:1');
      const out = await put(Buffer.from('é', 'utf8'), lease.token);
      expect(statuses(out)).toEqual([200]);
      expect(upstream.hits).toHaveLength(1);
      expect(upstream.hits[0]?.headers['x-fencegate-lock']).toBe(encodeURIComponent('tenant:é:1'));
    });

    it('"é" and a tenant literally named "Ã©" are different locks', async () => {
      await mint(store, 'tenant:é:1');
      const e = await mint(store, 'tenant:é:1');
      const mojibake = await mint(store, 'tenant:Ã©:1');
      expect(e.token).toBeGreaterThan(mojibake.token);
      // é's token was never issued for the lock of "Ã©" (sent as its own UTF-8 bytes).
      const crossed = await put(Buffer.from('Ã©', 'utf8'), e.token);
      expect(statuses(crossed)).toEqual([403]);
      expect(crossed).toContain('urn:fencegate:token-invalid');
      expect(crossed).toContain('tenant:\u00c3\u0083\u00c2\u00a9:1'); // the problem body is UTF-8
      expect(upstream.hits).toHaveLength(0);
      expect(statuses(await put(Buffer.from('Ã©', 'utf8'), mojibake.token))).toEqual([200]);
      expect(upstream.hits[0]?.headers['x-fencegate-lock']).toBe(encodeURIComponent('tenant:Ã©:1'));
      expect(statuses(await put(Buffer.from('é', 'utf8'), e.token))).toEqual([200]);
      expect(upstream.hits[1]?.headers['x-fencegate-lock']).toBe(encodeURIComponent('tenant:é:1'));
    });

    it('bytes that are not UTF-8 (a bare latin1 é) → 400 invalid-key, not forwarded', async () => {
      const lease = await mint(store, 'tenant:é:1');
      for (const bytes of [Buffer.from([0xe9]), Buffer.from([0xc3]), Buffer.from([0xed, 0xa0, 0x80])]) {
        const out = await put(bytes, lease.token);
        expect(statuses(out), bytes.toString('hex')).toEqual([400]);
        expect(out).toContain('urn:fencegate:invalid-key');
        expect(out).toContain('not valid UTF-8');
      }
      expect(upstream.hits).toHaveLength(0);
    });
  });

  describe('Expect: 100-continue', () => {
    const head = (path: string, token: string | null, length: number) =>
      `PUT ${path} HTTP/1.1\r\nHost: x\r\n${token === null ? '' : `Fencing-Token: ${token}\r\n`}` +
      `Content-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

    it('an admitted write gets 100 Continue, then its body is forwarded (without Expect)', async () => {
      const lease = await mint(store, 'order:1');
      const wire = new Wire(gw.port);
      wire.write(head('/orders/1', String(lease.token), 5));
      await wire.until((r) => statuses(r).length > 0);
      expect(statuses(wire.received)).toEqual([100]);
      wire.write('hello');
      const out = await wire.until(finalResponse);
      wire.end();
      expect(statuses(out)).toEqual([100, 200]);
      expect(upstream.hits).toHaveLength(1);
      expect(upstream.hits[0]?.bytes).toBe(5);
      expect(upstream.hits[0]?.headers.expect).toBeUndefined();
    });

    it('a refused write gets its final status without 100, and its body never reaches the upstream', async () => {
      const older = await mint(store, 'order:1');
      const newer = await mint(store, 'order:1');
      const admitted = new Wire(gw.port);
      admitted.write(head('/orders/1', String(newer.token), 1));
      await admitted.until((r) => statuses(r).includes(100));
      admitted.write('x');
      await admitted.until(finalResponse);
      admitted.end();
      expect(upstream.hits).toHaveLength(1);

      for (const [token, status] of [
        [String(older.token), 409], // stale
        [null, 428], // missing
        ['007', 400], // malformed
        ['999999', 403], // never issued
      ] as const) {
        const wire = new Wire(gw.port);
        wire.write(head('/orders/1', token, 4));
        const out = await wire.until(finalResponse);
        expect(statuses(out), String(token)).toEqual([status]);
        expect(out.toLowerCase()).toContain('connection: close');
        // A client that ignores the refusal and uploads anyway: nothing reaches the upstream.
        wire.write('evil');
        await wire.until(() => false, 100);
        wire.end();
      }
      expect(upstream.hits).toHaveLength(1);
    });

    it('no route → 404 without 100', async () => {
      const wire = new Wire(gw.port);
      wire.write(head('/nowhere', null, 3));
      const out = await wire.until(finalResponse);
      wire.end();
      expect(statuses(out)).toEqual([404]);
      expect(upstream.hits).toHaveLength(0);
    });

    it('no 100 while the write waits at the drain barrier; 100 once lower-token writes are done', async () => {
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => (release = resolve));
      upstream.handler = async (_req, res) => {
        await held;
        res.end('slow');
      };
      const lower = await mint(store, 'order:1');
      const higher = await mint(store, 'order:1');
      const first = new Wire(gw.port);
      first.write(head('/orders/1', String(lower.token), 1));
      await first.until((r) => statuses(r).includes(100));
      first.write('a');
      await expect.poll(() => upstream.hits.length).toBe(1);

      const second = new Wire(gw.port);
      second.write(head('/orders/1', String(higher.token), 1));
      await second.until((r) => statuses(r).length > 0, 300);
      expect(statuses(second.received)).toEqual([]); // waiting at the barrier: no 100 yet
      release();
      await second.until((r) => statuses(r).includes(100));
      second.write('b');
      const out = await second.until(finalResponse);
      expect(statuses(out)).toEqual([100, 200]);
      first.end();
      second.end();
      expect(upstream.hits).toHaveLength(2);
    });
  });
});

describe.each([true, false])('requests node:http does not hand to a handler (refusal lane %s)', (lane) => {
  let upstream: TestUpstream;
  let gw: TestGateway;
  beforeEach(async () => {
    upstream = await startUpstream();
    gw = await startGateway({
      store: new MemoryStore(),
      policy: ordersPolicy(upstream.url),
      refusalLane: lane,
    });
  });
  afterEach(async () => {
    await gw.close();
    await upstream.close();
  });

  it('answers CONNECT with a 405 problem, then closes the connection', async () => {
    const wire = new Wire(gw.port);
    wire.write('CONNECT upstream.example:443 HTTP/1.1\r\nHost: upstream.example:443\r\n\r\n');
    const got = await wire.until(() => wire.closed);
    expect(got).toMatch(/^HTTP\/1\.1 405 Method Not Allowed\r\n/);
    expect(got).toMatch(/content-type: application\/problem\+json/);
    expect(got).toMatch(/connection: close/);
    expect(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4))).toMatchObject({
      type: 'urn:fencegate:method-not-allowed',
      method: 'CONNECT',
    });
    expect(wire.closed).toBe(true);
    expect(upstream.hits).toHaveLength(0);
  });

  it('answers an Upgrade request as a plain request, and bytes the parser refuses with a 400 problem', async () => {
    const up = new Wire(gw.port);
    up.write('GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n');
    expect(await up.until(finalResponse)).toMatch(/^HTTP\/1\.1 404 [^]*"type":"urn:fencegate:no-route"/);
    up.end();
    const pri = new Wire(gw.port);
    pri.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const got = await pri.until(() => pri.closed);
    expect(got).toMatch(/^HTTP\/1\.1 400 [^]*"type":"urn:fencegate:bad-request"/);
  });
});
