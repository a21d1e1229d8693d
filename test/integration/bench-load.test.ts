/**
 * The benchmarks' load generators send what the rows claim and count what they say they
 * count: bench/paced.mjs (the latency rows' open-loop generator, run as its own process
 * over stdin/stdout as bench/run.mjs runs it; its own HTTP/1.1 client) and bench/wrk-put.lua
 * (the saturation rows' wrk script). A local server answers some ids with 409, a chunked
 * body or 204, and records the Fencing-Token and body of every request. Needs `wrk`.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOCKS = 8;
const TOKENS = Array.from({ length: LOCKS }, (_, i) => `${1000 + i}`);
const BODY = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });

let server: Server;
let origin: string;
const seen = { requests: 0, conflicts: 0, wrongToken: 0, wrongBody: 0 };

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      seen.requests++;
      const id = Number(/\/(\d+)$/.exec(req.url ?? '')?.[1]);
      if (req.headers['fencing-token'] !== TOKENS[id]) seen.wrongToken++;
      if (req.method !== 'PUT' || body !== BODY) seen.wrongBody++;
      if (id === 3) {
        seen.conflicts++;
        res.writeHead(409, { 'content-type': 'application/problem+json', 'content-length': '2' });
        res.end('{}');
      } else if (id === 5) {
        // No content-length: chunked, in two chunks.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"ok":');
        res.end('true}');
      } else if (id === 7) {
        res.writeHead(204);
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
        res.end('{"ok":true}');
      }
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const reset = () => Object.assign(seen, { requests: 0, conflicts: 0, wrongToken: 0, wrongBody: 0 });

describe('bench/paced.mjs (its own process, one job per line)', () => {
  it('sends every due request with its lock token and counts the non-2xx answers', async () => {
    reset();
    const child = spawn(process.execPath, ['bench/paced.mjs'], {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (out += d));
    const job = {
      origin,
      rate: 200,
      seconds: 1,
      connections: 4,
      base: 'orders',
      tokens: TOKENS,
      locks: LOCKS,
    };
    child.stdin.write(`${JSON.stringify(job)}\n`);
    child.stdin.end();
    await once(child, 'exit');
    const r = JSON.parse(out.trim()) as { total: number; bad: number; latencies: number[]; error?: string };
    expect(r.error).toBeUndefined();
    expect(r.total).toBe(200);
    expect(r.latencies).toHaveLength(200);
    expect(seen.requests).toBe(200);
    // Ids 0..7 in turn: id 3 got 409, the chunked and the 204 answers are fine.
    expect(seen.conflicts).toBe(25);
    expect(r.bad).toBe(25);
    expect(seen.wrongToken).toBe(0);
    expect(seen.wrongBody).toBe(0);
  });
});

describe('bench/wrk-put.lua', () => {
  const runWrk = async (want: string) => {
    const child = spawn('wrk', ['-t', '1', '-c', '2', '-d', '1s', '-s', 'bench/wrk-put.lua', origin], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...process.env,
        WRK_BASE: 'orders',
        WRK_LOCKS: String(LOCKS),
        WRK_TOKENS: TOKENS.join(','),
        WRK_EXPECT: want,
      },
    });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (out += d));
    const [code] = (await once(child, 'exit')) as [number];
    expect(code).toBe(0);
    const line = /^wrk-json (.*)$/m.exec(out);
    expect(line).not.toBeNull();
    return JSON.parse(line![1]!) as { requests: number; ok: number; bad: number; lastBadStatus: number };
  };

  it('puts each lock token on its own id and counts the answers that are not 2xx', async () => {
    reset();
    const r = await runWrk('0');
    expect(r.requests).toBeGreaterThan(LOCKS);
    expect(r.ok + r.bad).toBe(r.requests);
    // The server may have answered a request per connection that wrk stopped waiting for.
    expect(seen.conflicts - r.bad).toBeGreaterThanOrEqual(0);
    expect(seen.conflicts - r.bad).toBeLessThanOrEqual(2);
    expect(r.bad).toBeGreaterThan(0);
    expect(r.lastBadStatus).toBe(409);
    expect(seen.wrongToken).toBe(0);
    expect(seen.wrongBody).toBe(0);
  });

  it('with WRK_EXPECT=409 counts every other status as bad', async () => {
    reset();
    const r = await runWrk('409');
    expect(r.ok + r.bad).toBe(r.requests);
    expect(seen.conflicts - r.ok).toBeGreaterThanOrEqual(0);
    expect(seen.conflicts - r.ok).toBeLessThanOrEqual(2);
    expect(r.bad).toBeGreaterThan(r.ok);
  });
});
