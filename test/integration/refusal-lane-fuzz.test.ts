/**
 * A seeded fuzz of the refusal lane's handoff (src/http/lane.ts, docs/fuzzing.md): each
 * seed makes one connection's plan, a random pipeline of requests the lane answers (stale,
 * missing or malformed tokens, no route) and requests it hands to node:http (forwarded reads
 * and writes, large answers, chunked bodies, HTTP/1.0, heads split across writes), cut into
 * random writes with random gaps and read at a random pace (fast, slow, or not at all for a
 * while). The same plan goes to a gateway with the lane and to one without; what reaches
 * each upstream on that connection (method, path, sequence number, token, body) and every
 * byte of the answers must be the same.
 *
 * `npm test` runs a few fixed seeds. `npm run fuzz:lane -- --seconds 300` runs new seeds for
 * that long (LANE_FUZZ_SECONDS); `LANE_FUZZ_SEED=<seed>` replays one seed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from '../helpers/fence-model.js';
import {
  mint,
  ordersPolicy,
  sized,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import {
  converse,
  firstDifference,
  normalize,
  upstreamView,
  type Piece,
  type ReadPace,
} from '../helpers/lane-client.js';
import { MemoryStore } from '../helpers/memory-store.js';

const SECONDS = Number(process.env.LANE_FUZZ_SECONDS ?? 0);
const ONE_SEED = process.env.LANE_FUZZ_SEED !== undefined ? Number(process.env.LANE_FUZZ_SEED) : null;
/** The seeds `npm test` runs (about 10 s together on the 2-core machine). */
const FIXED_SEEDS = [1, 2, 3, 4, 5, 6, 339102339];

interface Tokens {
  stale: string;
  current: string;
}

interface Plan {
  pieces: Piece[];
  pace: ReadPace;
  /** Answers to wait for (the connection may close before, on a closing request). */
  answers: number;
  /** What was generated, for the failure message. */
  summary: string;
}

/** One connection's plan, from `seed` alone. */
function makePlan(seed: number, tokens: Tokens): Plan {
  const random = rng(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)]!;
  const body = () => 'b'.repeat(pick([0, 1, 5, 200, int(0, 3000)]));
  let large = 0;
  const put = (token: string | null, seq: number, text: string, extra = '') =>
    `PUT /orders/1 HTTP/1.1\r\nHost: gw\r\nX-Seq: ${seq}\r\n${token === null ? '' : `Fencing-Token: ${token}\r\n`}` +
    `${extra}Content-Length: ${text.length}\r\n\r\n${text}`;
  // The first four are the lane's, the rest node:http's.
  const kinds: [string, number, (seq: number) => string][] = [
    ['stale', 30, (seq) => put(tokens.stale, seq, body())],
    ['missing', 6, (seq) => put(null, seq, body())],
    ['malformed', 6, (seq) => put(pick(['12abc', '007', '-1', '99999999999999999999']), seq, body())],
    ['no-route', 14, (seq) => `${pick(['GET', 'DELETE'])} /nothing/${seq} HTTP/1.1\r\nHost: gw\r\n\r\n`],
    ['read', 14, (seq) => `GET /orders/r/${seq} HTTP/1.1\r\nHost: gw\r\nX-Seq: ${seq}\r\n\r\n`],
    [
      'large-read',
      3,
      (seq) => {
        // Answers larger than the socket's buffers, 2 MB of them at most (slow readers take long).
        const size = Math.min(int(20_000, 600_000), 2_000_000 - large);
        large += size;
        return `GET /orders/r/${seq}?size=${size} HTTP/1.1\r\nHost: gw\r\nX-Seq: ${seq}\r\n\r\n`;
      },
    ],
    ['write', 10, (seq) => put(tokens.current, seq, body())],
    [
      'chunked',
      4,
      (seq) => {
        const chunks = Array.from({ length: int(1, 3) }, () => 'c'.repeat(int(1, 400)));
        const coded = chunks.map((c) => `${c.length.toString(16)}\r\n${c}\r\n`).join('') + '0\r\n\r\n';
        return (
          put(tokens.current, seq, '', 'Transfer-Encoding: chunked\r\n').replace(
            'Content-Length: 0\r\n',
            '',
          ) + coded
        );
      },
    ],
    [
      'http/1.0',
      3,
      (seq) => `GET /orders/r/${seq} HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nX-Seq: ${seq}\r\n\r\n`,
    ],
  ];
  const total = kinds.reduce((n, [, w]) => n + w, 0);
  const kind = () => {
    let at = random() * total;
    for (const k of kinds) if ((at -= k[1]) < 0) return k;
    return kinds[0]!;
  };
  const count = pick([int(1, 20), int(20, 300), int(300, 2500)]);
  // Often a run of the lane's requests first: its answers back up before the first handoff.
  // (Small ones: a 64 KiB read holds many, and their answers outgrow the socket's buffers.)
  const lanes: typeof kinds = [
    ['no-route', 1, (seq) => `GET /nothing/${seq} HTTP/1.1\r\nHost: gw\r\n\r\n`],
    ['stale', 1, (seq) => put(tokens.stale, seq, '')],
  ];
  const prefix = pick([0, int(1, 50), int(200, 1400), int(200, 4000)]);
  const made: string[] = [];
  let text = '';
  for (let seq = 1; seq <= prefix + count; seq++) {
    const [name, , render] = seq <= prefix ? pick(lanes) : kind();
    made.push(name);
    text += render(seq);
  }
  // Now and then the last request closes the connection.
  const closing = random() < 0.1;
  if (closing) {
    made.push('close');
    text += `GET /nothing HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n`;
  }
  const bytes = Buffer.from(text, 'latin1');
  const pieces: Piece[] = [];
  let gaps = 0;
  for (let at = 0; at < bytes.length;) {
    const size = pick([
      int(1, 60),
      int(60, 5000),
      int(60, 5000),
      int(5000, 70_000),
      // Around libuv's 64 KiB read.
      65_536 - (at % 65_536) + int(-40, 40),
      random() < 0.2 ? bytes.length : int(1, 200),
    ]);
    const end = Math.min(bytes.length, at + Math.max(1, size));
    // At most 20 writes wait before they go (a plan stays a second or two long).
    const gapMs = pieces.length === 0 || gaps >= 20 ? 0 : pick([0, 0, 0, int(1, 5), int(10, 30)]);
    if (gapMs > 0) gaps += 1;
    pieces.push({ bytes: bytes.subarray(at, end), gapMs });
    at = end;
  }
  const pace = pick<ReadPace>([
    { kind: 'fast' },
    { kind: 'slow', onMs: int(2, 8), offMs: int(2, 12) },
    { kind: 'paused', forMs: int(50, 400) },
  ]);
  const tally = new Map<string, number>();
  for (const m of made) tally.set(m, (tally.get(m) ?? 0) + 1);
  const summary =
    `${made.length} requests (${[...tally].map(([k, n]) => `${k} ${n}`).join(', ')}), ${bytes.length} bytes ` +
    `in ${pieces.length} writes (gaps ${pieces.reduce((n, p) => n + p.gapMs, 0)} ms), reader ${JSON.stringify(pace)}`;
  return { pieces, pace, answers: made.length, summary };
}

describe('the refusal lane against node:http, on seeded random connections', () => {
  const store = new MemoryStore();
  let lane: TestGateway;
  let node: TestGateway;
  let upLane: TestUpstream;
  let upNode: TestUpstream;
  let tokens: Tokens;

  beforeAll(async () => {
    upLane = await startUpstream(sized, { keepBodies: true });
    upNode = await startUpstream(sized, { keepBodies: true });
    lane = await startGateway({ store, policy: ordersPolicy(upLane.url, { timeoutMs: 60_000 }) });
    node = await startGateway({
      store,
      policy: ordersPolicy(upNode.url, { timeoutMs: 60_000 }),
      refusalLane: false,
    });
    const stale = (await mint(store, 'order:1')).token;
    const current = (await mint(store, 'order:1')).token;
    tokens = { stale: String(stale), current: String(current) };
    // Both gateways learn that `stale` is stale: each admits the current token once.
    for (const gw of [lane, node]) {
      const put = `PUT /orders/1 HTTP/1.1\r\nHost: gw\r\nFencing-Token: ${current}\r\nContent-Length: 0\r\n\r\n`;
      const c = await converse(gw.port, [{ bytes: put, gapMs: 0 }], { pace: { kind: 'fast' }, answers: 1 });
      expect(c.statuses).toEqual([200]);
    }
  });

  afterAll(async () => {
    await lane?.close();
    await node?.close();
    await upLane?.close();
    await upNode?.close();
  });

  /** Sends seed `seed`'s plan to both gateways; null when they agree, else what differs. */
  async function differs(seed: number): Promise<string | null> {
    const plan = makePlan(seed, tokens);
    const run = async (gw: TestGateway, up: TestUpstream) => {
      const from = up.hits.length;
      const c = await converse(gw.port, plan.pieces, { pace: plan.pace, answers: plan.answers });
      const upstream = upstreamView(up.hits.slice(from))
        .map((h) => JSON.stringify(h))
        .sort();
      return { statuses: c.statuses.join(','), closed: c.closed, upstream, text: normalize(c.text) };
    };
    const started = Date.now();
    const viaLane = await run(lane, upLane);
    const viaNode = await run(node, upNode);
    if (process.env.LANE_FUZZ_VERBOSE)
      console.log(`[lane-fuzz] seed ${seed} ${Date.now() - started} ms: ${plan.summary}`);
    const wrong: string[] = [];
    if (viaLane.upstream.join('\n') !== viaNode.upstream.join('\n')) {
      const only = (a: string[], b: string[]) => a.filter((x) => !b.includes(x)).slice(0, 3);
      wrong.push(
        `upstream: ${viaLane.upstream.length} requests with the lane, ${viaNode.upstream.length} without; ` +
          `only with the lane: ${only(viaLane.upstream, viaNode.upstream).join(' ')}; ` +
          `only without: ${only(viaNode.upstream, viaLane.upstream).join(' ')}`,
      );
    }
    if (viaLane.statuses !== viaNode.statuses)
      wrong.push(
        `statuses: with the lane ${viaLane.statuses.slice(0, 300)}… without ${viaNode.statuses.slice(0, 300)}…`,
      );
    if (viaLane.closed !== viaNode.closed)
      wrong.push(`closed: ${viaLane.closed} with the lane, ${viaNode.closed} without`);
    const text = firstDifference(viaLane.text, viaNode.text);
    if (text !== null) wrong.push(`answers differ ${text}`);
    if (wrong.length === 0) return null;
    return `seed ${seed}: ${plan.summary}\n  ${wrong.join('\n  ')}\n  replay: LANE_FUZZ_SEED=${seed} npx vitest run test/integration/refusal-lane-fuzz.test.ts`;
  }

  const timeoutMs = SECONDS > 0 ? SECONDS * 1000 + 120_000 : 60_000;
  it(
    'answers, closes and forwards as node:http does, whatever the writes and the reader',
    async () => {
      if (ONE_SEED !== null) {
        expect(await differs(ONE_SEED)).toBe(null);
        return;
      }
      if (SECONDS <= 0) {
        for (const seed of FIXED_SEEDS) expect(await differs(seed)).toBe(null);
        return;
      }
      const start = Date.now() % 1_000_000_000;
      console.log(`[lane-fuzz] seeds from ${start}, for ${SECONDS} s`);
      let seed = start;
      for (const deadline = Date.now() + SECONDS * 1000; Date.now() < deadline; seed++) {
        const wrong = await differs(seed);
        if (wrong !== null) console.log(`[lane-fuzz] ${wrong}`);
        expect(wrong).toBe(null);
      }
      console.log(`[lane-fuzz] ${seed - start} seeds, all agreed`);
    },
    timeoutMs,
  );
});
