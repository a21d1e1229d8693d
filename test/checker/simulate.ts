/**
 * Valid histories for testing the checker: a fast-check plan of acquires and
 * writes, played against a model of a correct issuer (strictly increasing tokens)
 * and gateway (admit token ≥ highest, drain barrier before a higher token is
 * applied, 503 when the store is down). Every history it produces must pass.
 */
import fc from 'fast-check';
import { formatToken, MAX_TOKEN } from '../../src/tokens.js';
import type { AppliedRecord, ClientOperation, GrantRecord, History, OperationStatus } from './types.js';

export type WriteOutcome =
  | 'ok' // forwarded, applied, 2xx
  | 'slow' // admitted, applied later (drain barrier), 2xx
  | 'timeout-applied' // applied, but the client saw a timeout / 504
  | 'timeout-lost' // admitted, never applied, client saw a timeout / 504
  | 'upstream-error' // admitted, upstream answered 502 without applying
  | 'unavailable' // store down: 503, not forwarded
  | 'no-token' // 428
  | 'malformed' // 400
  | 'forged'; // 403

export type Step =
  | { kind: 'acquire'; lock: number; owner: number; gap: number; replay: boolean }
  | { kind: 'write'; lock: number; owner: number; outcome: WriteOutcome; lateStatus: OperationStatus }
  | { kind: 'drain'; lock: number };

export interface Plan {
  bases: bigint[];
  owners: number;
  /** Applied writes carry the client's requestId (else a gateway-side id that joins nothing). */
  joinById: boolean;
  /** Applied writes carry the writer (else the checker derives it from the grant). */
  writerInApplied: boolean;
  withGrantedAt: boolean;
  steps: Step[];
}

export interface Simulated {
  history: History;
  /** Per operation: how many applied writes preceded it, and whether it was applied. */
  ops: { appliedBefore: number; applied: boolean }[];
}

/** Mostly successful writes, with every kind of failure now and then. */
const outcomeArb: fc.Arbitrary<WriteOutcome> = fc.oneof(
  { weight: 12, arbitrary: fc.constant<WriteOutcome>('ok') },
  { weight: 3, arbitrary: fc.constant<WriteOutcome>('slow') },
  { weight: 2, arbitrary: fc.constant<WriteOutcome>('timeout-applied') },
  { weight: 1, arbitrary: fc.constant<WriteOutcome>('timeout-lost') },
  { weight: 1, arbitrary: fc.constant<WriteOutcome>('upstream-error') },
  { weight: 2, arbitrary: fc.constant<WriteOutcome>('unavailable') },
  { weight: 1, arbitrary: fc.constantFrom<WriteOutcome>('no-token', 'malformed', 'forged') },
);

export function planArb(maxSteps = 120): fc.Arbitrary<Plan> {
  return fc
    .record({
      bases: fc.array(fc.bigInt({ min: 1n, max: MAX_TOKEN - 1_000_000n }), { minLength: 1, maxLength: 4 }),
      owners: fc.integer({ min: 1, max: 5 }),
      joinById: fc.boolean(),
      writerInApplied: fc.boolean(),
      withGrantedAt: fc.boolean(),
      raw: fc.array(
        fc.record({
          pick: fc.integer({ min: 0, max: 9 }),
          lock: fc.nat(),
          owner: fc.nat(),
          gap: fc.integer({ min: 0, max: 3 }),
          replay: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
          outcome: outcomeArb,
          lateStatus: fc.constantFrom<OperationStatus>('timeout', 'error', 504),
        }),
        { maxLength: maxSteps, size: 'max' },
      ),
    })
    .map(({ raw, ...rest }) => ({
      ...rest,
      steps: raw.map((r): Step => {
        const lock = r.lock % rest.bases.length;
        const owner = r.owner % rest.owners;
        if (r.pick < 3) return { kind: 'acquire', lock, owner, gap: r.gap, replay: r.replay };
        if (r.pick < 4) return { kind: 'drain', lock };
        return { kind: 'write', lock, owner, outcome: r.outcome, lateStatus: r.lateStatus };
      }),
    }));
}

interface LockModel {
  name: string;
  issued: bigint;
  highest: bigint | null;
  held: Map<number, GrantRecord>;
  /** Admitted writes not yet applied (slow upstream), applied before any higher token is. */
  inflight: { op: ClientOperation; index: number; token: bigint }[];
}

export function simulate(plan: Plan): Simulated {
  const grants: GrantRecord[] = [];
  const applied: AppliedRecord[] = [];
  const operations: ClientOperation[] = [];
  const ops: Simulated['ops'] = [];
  const locks: LockModel[] = plan.bases.map((base, i) => ({
    name: i % 2 === 0 ? `order:${i}` : `tenant:é ${i}`,
    issued: base - 1n,
    highest: null,
    held: new Map(),
    inflight: [],
  }));
  let clock = 1_700_000_000_000;
  const owner = (n: number) => `worker-${n}`;

  const apply = (lock: LockModel, op: ClientOperation, index: number, token: bigint) => {
    applied.push({
      seq: applied.length + 1,
      lock: lock.name,
      token: formatToken(token),
      ...(plan.writerInApplied ? { writer: op.writer } : {}),
      requestId: plan.joinById ? op.requestId : `gw-${applied.length + 1}`,
      path: `/orders/${index}`,
    });
    const meta = ops[index];
    if (meta !== undefined) meta.applied = true;
  };
  const drain = (lock: LockModel) => {
    for (const w of lock.inflight.splice(0)) apply(lock, w.op, w.index, w.token);
  };

  for (const step of plan.steps) {
    const lock = locks[step.lock];
    if (lock === undefined) continue;
    clock += 1 + (step.lock % 2);
    if (step.kind === 'drain') {
      drain(lock);
      continue;
    }
    if (step.kind === 'acquire') {
      const last = lock.held.get(step.owner);
      if (step.replay && last !== undefined) {
        grants.push({ ...last });
        continue;
      }
      lock.issued += 1n + BigInt(step.gap);
      const grant: GrantRecord = {
        lock: lock.name,
        token: formatToken(lock.issued),
        owner: owner(step.owner),
        leaseId: `lease-${grants.length}`,
        ...(plan.withGrantedAt ? { grantedAt: clock } : {}),
      };
      lock.held.set(step.owner, grant);
      grants.push(grant);
      continue;
    }

    // Writers are owners that hold (or held) a grant on the lock, when there are any.
    const holders = [...lock.held.keys()];
    const writer = holders.length === 0 ? step.owner : (holders[step.owner % holders.length] ?? step.owner);
    const index = operations.length;
    const grant = lock.held.get(writer);
    const op: ClientOperation = {
      lock: lock.name,
      token: grant === undefined ? null : grant.token,
      writer: owner(writer),
      requestId: `op-${index}`,
      status: 0,
      acknowledged: false,
    };
    operations.push(op);
    ops.push({ appliedBefore: applied.length, applied: false });
    const token = grant === undefined ? null : BigInt(grant.token);
    if (token === null || step.outcome === 'no-token') {
      op.token = null;
      op.status = 428;
    } else if (step.outcome === 'malformed') {
      op.token = `0${token}`;
      op.status = 400;
    } else if (step.outcome === 'forged') {
      op.token = formatToken(lock.issued + 1n);
      op.status = 403;
    } else if (step.outcome === 'unavailable') {
      op.status = 503;
    } else if (lock.highest !== null && token < lock.highest) {
      op.status = 409;
    } else {
      // Admitted: the drain barrier lets lower in-flight writes land first.
      if (lock.highest !== null && token > lock.highest) drain(lock);
      lock.highest = token;
      if (step.outcome === 'ok') {
        apply(lock, op, index, token);
        op.status = 200;
      } else if (step.outcome === 'slow') {
        lock.inflight.push({ op, index, token });
        op.status = 204;
      } else if (step.outcome === 'timeout-applied') {
        apply(lock, op, index, token);
        op.status = step.lateStatus;
      } else if (step.outcome === 'timeout-lost') {
        op.status = step.lateStatus;
      } else {
        op.status = 502;
      }
      op.acknowledged = op.status === 200 || op.status === 204;
    }
  }
  for (const lock of locks) drain(lock);
  return { history: { applied, grants, operations }, ops };
}

export const historyArb = (maxSteps?: number): fc.Arbitrary<Simulated> => planArb(maxSteps).map(simulate);
