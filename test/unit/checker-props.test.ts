/**
 * The history checker on generated histories: every history a correct issuer and
 * gateway can produce passes, and each one-step mutation that breaks the
 * contract is caught.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkHistory, formatViolation, type CheckResult, type ViolationKind } from '../checker/index.js';
import {
  dropApplied,
  duplicateGrant,
  injectApplied,
  isRefused,
  swapApplied,
  swappablePairs,
  tupleCounts,
  tupleOf,
  breaksOrder,
  wasGranted,
} from '../checker/mutate.js';
import { historyArb, planArb, simulate, type Simulated } from '../checker/simulate.js';

const RUNS = { numRuns: 150 };

function kindOf(result: CheckResult): ViolationKind | 'ok' {
  return result.ok ? 'ok' : result.violation.kind;
}

/** Histories whose two records share request ids (or not), with enough writes to mutate. */
const joined = (byId: boolean): fc.Arbitrary<Simulated> =>
  planArb(150).map((p) => simulate({ ...p, joinById: byId }));

describe('checker on generated valid histories', () => {
  it('passes every history of a correct issuer and gateway', () => {
    fc.assert(
      fc.property(historyArb(), ({ history }) => {
        const result = checkHistory(history, { clientRecordComplete: true });
        expect(result.ok, formatViolation(result)).toBe(true);
        expect(result.stats.applied).toBe(history.applied.length);
      }),
      RUNS,
    );
  });

  it('passes large histories (thousands of events) quickly', () => {
    fc.assert(
      fc.property(historyArb(3000), ({ history }) => {
        const result = checkHistory(history, { clientRecordComplete: true });
        expect(result.ok, formatViolation(result)).toBe(true);
      }),
      { numRuns: 10 },
    );
  });
});

describe('checker catches mutated histories', () => {
  it('two applied writes of one lock with different tokens, swapped', () => {
    fc.assert(
      fc.property(historyArb(), fc.nat(), ({ history }, pick) => {
        const pairs = swappablePairs(history);
        fc.pre(pairs.length > 0);
        const [i, j] = pairs[pick % pairs.length] ?? [0, 0];
        const result = checkHistory(swapApplied(history, i, j));
        expect(['stale-owner', 'token-regression']).toContain(kindOf(result));
      }),
      RUNS,
    );
  });

  it('a grant recorded twice, for another owner or another lease', () => {
    fc.assert(
      fc.property(
        historyArb(),
        fc.nat(),
        fc.constantFrom('owner', 'lease') as fc.Arbitrary<'owner' | 'lease'>,
        fc.nat(),
        (sim, g, variant, at) => {
          const { grants } = sim.history;
          fc.pre(grants.length > 0);
          const result = checkHistory(duplicateGrant(sim.history, g % grants.length, variant, at));
          expect(kindOf(result), formatViolation(result)).toBe('duplicate-grant');
        },
      ),
      RUNS,
    );
  });

  it('an acknowledged write dropped from the upstream record (joined by requestId)', () => {
    fc.assert(
      fc.property(joined(true), fc.nat(), ({ history }, pick) => {
        const acked = new Set(history.operations.filter((o) => o.acknowledged).map((o) => o.requestId));
        const targets = history.applied.flatMap((a, i) => (acked.has(a.requestId ?? '') ? [i] : []));
        fc.pre(targets.length > 0);
        const result = checkHistory(dropApplied(history, targets[pick % targets.length] ?? 0));
        expect(kindOf(result), formatViolation(result)).toBe('lost-ack');
      }),
      RUNS,
    );
  });

  it('an acknowledged write dropped (matched by lock, token and writer, where the counts tell)', () => {
    fc.assert(
      fc.property(joined(false), fc.nat(), ({ history }, pick) => {
        const counts = tupleCounts(history);
        const owners = new Map(history.grants.map((g) => [`${g.lock}\u0000${g.token}`, g.owner]));
        const targets = history.applied.flatMap((a, i) => {
          const c = counts.get(
            tupleOf(a.lock, a.token, a.writer ?? owners.get(`${a.lock}\u0000${a.token}`) ?? ''),
          );
          return c !== undefined && c.acked === c.applied ? [i] : [];
        });
        fc.pre(targets.length > 0);
        const result = checkHistory(dropApplied(history, targets[pick % targets.length] ?? 0));
        expect(kindOf(result), formatViolation(result)).toBe('lost-ack');
      }),
      RUNS,
    );
  });

  it('a refused write injected into the upstream record, where it was sent', () => {
    fc.assert(
      fc.property(joined(true), fc.nat(), (sim, pick) => {
        const { history, ops } = sim;
        const refused = history.operations.flatMap((o, i) => (isRefused(o) ? [i] : []));
        fc.pre(refused.length > 0);
        const target = refused[pick % refused.length] ?? 0;
        const op = history.operations[target];
        const at = ops[target]?.appliedBefore ?? 0;
        fc.pre(op !== undefined);
        const result = checkHistory(injectApplied(history, target, at, true));
        // 400/403/428 carry no granted token; a 409 is usually stale by then; otherwise it is a refused write.
        const expected: ViolationKind[] = !wasGranted(history, op.lock, op.token)
          ? ['ungranted-token']
          : breaksOrder(history, op.lock, BigInt(op.token ?? '0'), at) === 'before'
            ? ['stale-owner', 'token-regression']
            : ['refused-applied'];
        expect(expected, formatViolation(result)).toContain(kindOf(result));
      }),
      RUNS,
    );
  });

  it('a refused (503) write injected, matched by lock, token and writer, where the counts tell', () => {
    fc.assert(
      fc.property(joined(false), fc.nat(), (sim, pick) => {
        const { history, ops } = sim;
        const counts = tupleCounts(history);
        const targets = history.operations.flatMap((o, i) => {
          const c = counts.get(tupleOf(o.lock, o.token, o.writer));
          const at = ops[i]?.appliedBefore ?? 0;
          const inOrder = o.token !== null && breaksOrder(history, o.lock, BigInt(o.token), at) === null;
          return o.status === 503 && inOrder && c !== undefined && c.applied === c.acked + c.maybe ? [i] : [];
        });
        fc.pre(targets.length > 0);
        const target = targets[pick % targets.length] ?? 0;
        const result = checkHistory(injectApplied(history, target, ops[target]?.appliedBefore ?? 0, false));
        expect(kindOf(result), formatViolation(result)).toBe('refused-applied');
      }),
      RUNS,
    );
  });
});
