/**
 * The history checker on hand-made histories: a valid one passes, and each kind
 * of violation is caught, with the right kind, and the first one is reported.
 */
import { describe, expect, it } from 'vitest';
import { OrderBook } from '../../src/sample/index.js';
import {
  appliedFromSample,
  checkHistory,
  formatViolation,
  orderLock,
  type AppliedRecord,
  type CheckResult,
  type ClientOperation,
  type GrantRecord,
  type History,
  type OperationStatus,
  type ViolationKind,
} from '../checker/index.js';

const L = 'order:42';
const grant = (token: string, owner: string, extra: Partial<GrantRecord> = {}): GrantRecord => ({
  lock: L,
  token,
  owner,
  leaseId: `lease-${owner}-${token}`,
  ...extra,
});
const applied = (
  seq: number,
  token: string,
  requestId: string,
  extra: Partial<AppliedRecord> = {},
): AppliedRecord => ({
  seq,
  lock: L,
  token,
  requestId,
  ...extra,
});
const op = (
  requestId: string,
  token: string | null,
  writer: string,
  status: OperationStatus,
): ClientOperation => ({
  lock: L,
  token,
  writer,
  requestId,
  status,
  acknowledged: typeof status === 'number' && status >= 200 && status < 300,
});

/** The classic run, fenced correctly: A (41) pauses, B (42) writes, A's late write is refused. */
function classic(): History {
  return {
    grants: [grant('41', 'A'), grant('42', 'B')],
    applied: [applied(1, '41', 'r1'), applied(2, '42', 'r2'), applied(3, '42', 'r3')],
    operations: [
      op('r1', '41', 'A', 200),
      op('r2', '42', 'B', 200),
      op('r3', '42', 'B', 'timeout'),
      op('r4', '41', 'A', 409),
      op('r5', null, 'A', 428),
      op('r6', '041', 'A', 400),
      op('r7', '43', 'A', 403),
      op('r8', '42', 'B', 503),
      op('r9', '42', 'B', 504),
    ],
  };
}

function violationOf(result: CheckResult): { kind: ViolationKind; message: string } {
  if (result.ok) throw new Error('expected a violation, the history passed');
  return result.violation;
}

const with_ = (h: History, patch: Partial<History>): History => ({ ...h, ...patch });

describe('checkHistory: valid histories', () => {
  it('passes the classic fenced run, with stats', () => {
    const result = checkHistory(classic());
    expect(result, formatViolation(result)).toMatchObject({ ok: true });
    expect(result.stats).toEqual({
      locks: 1,
      grants: 2,
      applied: 3,
      operations: 9,
      acknowledged: 2,
      refused: 5,
      indeterminate: 2,
      joinedByRequestId: 3,
    });
  });

  it('passes when the records do not share request ids (matched by lock, token and writer)', () => {
    const h = classic();
    const result = checkHistory(
      with_(h, { applied: h.applied.map((a) => ({ ...a, requestId: `gw-${a.seq}` })) }),
    );
    expect(result.ok, formatViolation(result)).toBe(true);
    expect(result.stats.joinedByRequestId).toBe(0);
  });

  it('accepts a replayed grant (same owner and lease recorded twice) and equal tokens in a row', () => {
    const h = classic();
    expect(checkHistory(with_(h, { grants: [...h.grants, grant('42', 'B')] })).ok).toBe(true);
  });

  it('compares tokens as bigint: 2^53 + 1 after 2^53 is an increase', () => {
    const [lo, hi] = ['9007199254740992', '9007199254740993'];
    const h: History = {
      grants: [grant(lo, 'A'), grant(hi, 'B')],
      applied: [applied(1, lo, 'r1'), applied(2, hi, 'r2')],
      operations: [op('r1', lo, 'A', 200), op('r2', hi, 'B', 200)],
    };
    expect(checkHistory(h).ok).toBe(true);
    const swapped = with_(h, { applied: [applied(1, hi, 'r2'), applied(2, lo, 'r1')] });
    expect(violationOf(checkHistory(swapped)).kind).toBe('stale-owner');
  });
});

describe('checkHistory: each kind of violation', () => {
  const cases: [ViolationKind, string, () => History][] = [
    [
      'duplicate-grant',
      'one token to two owners',
      () => with_(classic(), { grants: [grant('41', 'A'), grant('42', 'B'), grant('42', 'C')] }),
    ],
    [
      'duplicate-grant',
      'one token to two leases of one owner',
      () =>
        with_(classic(), {
          grants: [grant('41', 'A'), grant('42', 'B'), grant('42', 'B', { leaseId: 'other' })],
        }),
    ],
    [
      'grant-regression',
      'a later grant with a lower token',
      () =>
        with_(classic(), {
          grants: [grant('42', 'B', { grantedAt: 100 }), grant('41', 'A', { grantedAt: 200 })],
        }),
    ],
    [
      'ungranted-token',
      'a token never granted',
      () => with_(classic(), { applied: [...classic().applied, applied(4, '43', 'r7')] }),
    ],
    [
      'ungranted-token',
      'a write that arrived without a token',
      () => with_(classic(), { applied: [applied(1, '', 'r5'), ...classic().applied.slice(1)] }),
    ],
    [
      'ungranted-token',
      'a token granted to someone else',
      () => with_(classic(), { applied: [applied(1, '41', 'r1', { writer: 'B' })] }),
    ],
    [
      'stale-owner',
      "the earlier owner's write after the later owner's",
      () => with_(classic(), { applied: [...classic().applied, applied(4, '41', 'r4')] }),
    ],
    [
      'token-regression',
      "one owner's writes out of token order",
      () => ({
        grants: [grant('41', 'A'), grant('43', 'A')],
        applied: [applied(1, '43', 'r2'), applied(2, '41', 'r1')],
        operations: [op('r1', '41', 'A', 200), op('r2', '43', 'A', 200)],
      }),
    ],
    [
      'refused-applied',
      'a 503 (store down) that was forwarded anyway',
      () => with_(classic(), { applied: [...classic().applied, applied(4, '42', 'r8')] }),
    ],
    [
      'refused-applied',
      'matched by (lock, token, writer)',
      () => {
        // B's 42: one acknowledged + two indeterminate (timeout, 504) + a 503; four applied.
        const h = classic();
        const more = [...h.applied, applied(4, '42', ''), applied(5, '42', '')];
        return with_(h, { applied: more.map((a) => ({ ...a, requestId: null })) });
      },
    ],
    [
      'lost-ack',
      'an acknowledged write missing upstream',
      () => with_(classic(), { applied: classic().applied.filter((a) => a.requestId !== 'r1') }),
    ],
    [
      'malformed-input',
      'seq out of order',
      () => with_(classic(), { applied: [applied(2, '41', 'r1'), applied(1, '42', 'r2')] }),
    ],
    [
      'malformed-input',
      'a grant with a non-canonical token',
      () => with_(classic(), { grants: [grant('+41', 'A')] }),
    ],
    [
      'malformed-input',
      'acknowledged without a 2xx',
      () => with_(classic(), { operations: [{ ...op('r1', '41', 'A', 409), acknowledged: true }] }),
    ],
  ];
  it.each(cases)('%s: %s', (kind, _what, make) => {
    const result = checkHistory(make());
    expect(violationOf(result).kind, formatViolation(result)).toBe(kind);
  });

  it('phantom-write (one request applied twice) only when the client record is complete', () => {
    const h: History = {
      grants: [grant('41', 'A')],
      applied: [applied(1, '41', 'r1'), applied(2, '41', 'r1')],
      operations: [op('r1', '41', 'A', 200)],
    };
    expect(checkHistory(h).ok).toBe(true);
    expect(violationOf(checkHistory(h, { clientRecordComplete: true })).kind).toBe('phantom-write');
  });

  it('a timeout may or may not have been applied', () => {
    const h = classic();
    expect(checkHistory(with_(h, { applied: h.applied.filter((a) => a.requestId !== 'r3') })).ok).toBe(true);
  });

  it('refusedStatuses can be narrowed (e.g. when the upstream itself answers 409)', () => {
    const h = with_(classic(), { applied: [...classic().applied, applied(4, '42', 'r8')] });
    expect(checkHistory(h, { refusedStatuses: [400, 403, 409, 428] }).ok).toBe(true);
  });
});

describe('checkHistory: the first violation, and its context', () => {
  it('reports the first violation in apply order, across locks', () => {
    const h = classic();
    const other = { lock: 'order:7' };
    const bad: History = {
      grants: [...h.grants, { ...grant('5', 'C'), ...other }],
      applied: [
        ...h.applied.slice(0, 2),
        { ...applied(3, '6', 'x1'), ...other }, // ungranted, first
        applied(4, '41', 'r4'), // stale owner, second
      ],
      operations: h.operations,
    };
    const v = violationOf(checkHistory(bad));
    expect(v).toMatchObject({ kind: 'ungranted-token', lock: 'order:7' });
  });

  it("stale-owner wins over token-regression when a later owner's write came in between", () => {
    // B (42) wrote, then A (43) wrote, then A's old 41: A is stale with respect to B.
    const h: History = {
      grants: [grant('41', 'A'), grant('42', 'B'), grant('43', 'A')],
      applied: [applied(1, '42', 'b'), applied(2, '43', 'a2'), applied(3, '41', 'a1')],
      operations: [],
    };
    const v = violationOf(checkHistory(h));
    expect(v.kind).toBe('stale-owner');
    expect(v.message).toContain('after seq 1 from B (token 42)');
  });

  it('grant problems come before apply-order problems, which come before lost acknowledgements', () => {
    const h = classic();
    const stale = applied(4, '41', 'r4');
    const lostAndStale = with_(h, {
      applied: [...h.applied.slice(1), stale].map((a, i) => ({ ...a, seq: i + 1 })),
    });
    expect(violationOf(checkHistory(lostAndStale)).kind).toBe('stale-owner');
    const withDup = with_(lostAndStale, { grants: [...h.grants, grant('41', 'Z')] });
    expect(violationOf(checkHistory(withDup)).kind).toBe('duplicate-grant');
  });

  it('shows 3 events either side, marks the violation and the write it conflicts with', () => {
    const grants = [grant('41', 'A'), grant('42', 'B')];
    const writes = [applied(1, '41', 'a1')];
    for (let i = 2; i <= 9; i++) writes.push(applied(i, '42', `b${i}`));
    writes.push(applied(10, '41', 'late'));
    for (let i = 11; i <= 15; i++) writes.push(applied(i, '42', `b${i}`));
    const result = checkHistory({ grants, applied: writes, operations: [] });
    const v = violationOf(result) as Extract<CheckResult, { ok: false }>['violation'];
    expect(v.kind).toBe('stale-owner');
    expect(v.message).toContain('seq 10 from A (token 41)');
    expect(v.message).toContain('seq 2 from B (token 42)');
    const seqs = v.context.map((c) => (c.event.source === 'applied' ? c.event.record.seq : -1));
    expect(seqs).toEqual([2, 7, 8, 9, 10, 11, 12, 13]);
    expect(v.context.map((c) => c.mark)).toEqual([
      'related',
      null,
      null,
      null,
      'violation',
      null,
      null,
      null,
    ]);
    const text = formatViolation(result);
    expect(text).toMatch(/^stale-owner on lock "order:42": /);
    expect(text).toContain('>> applied #9 seq 10 lock "order:42" token 41 req late');
    expect(text).toContain(' * applied #1 seq 2');
  });
});

describe('appliedFromSample: the sample upstream record', () => {
  it('converts the OrderBook log; the writer comes from the grant', () => {
    const book = new OrderBook();
    book.apply(
      'PUT',
      '42',
      { a: 1 },
      { fencingToken: '41', requestId: 'g1', bytes: 7, lock: null, clientRequestId: null, writer: null },
    );
    book.apply(
      'PUT',
      '42',
      { a: 2 },
      { fencingToken: '42', requestId: 'g2', bytes: 7, lock: null, clientRequestId: null, writer: null },
    );
    const grants = [grant('41', 'A'), grant('42', 'B')];
    const operations = [op('c1', '41', 'A', 201), op('c2', '42', 'B', 200)];
    const records = appliedFromSample(book.writes(), orderLock);
    expect(records[0]).toMatchObject({ seq: 1, lock: 'order:42', token: '41', requestId: 'g1' });
    expect(checkHistory({ grants, applied: records, operations }).ok).toBe(true);

    book.apply(
      'PUT',
      '42',
      { a: 3 },
      { fencingToken: '41', requestId: 'g3', bytes: 7, lock: null, clientRequestId: null, writer: null },
    );
    book.apply(
      'PUT',
      '42',
      { a: 4 },
      { fencingToken: null, requestId: null, bytes: 7, lock: null, clientRequestId: null, writer: null },
    );
    const late = checkHistory({ grants, applied: appliedFromSample(book.writes(), orderLock), operations });
    expect(violationOf(late).kind).toBe('stale-owner');
  });
});
