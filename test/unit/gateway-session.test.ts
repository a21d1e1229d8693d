/**
 * A gateway process's session (src/gateway/session.ts): valid while beats are
 * acknowledged, lapses (cutting what it tracks) when they are not, and is replaced by a
 * new session when another gateway ended it. The observer ends a silent session only
 * with a compare on the beat it saw unchanged.
 */
import { describe, expect, it } from 'vitest';
import { SessionObserver } from '../../src/gateway/observer.js';
import { GatewaySessions, SessionLease } from '../../src/gateway/session.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { faultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep } from '../helpers/wait.js';

const log = { warn: () => undefined };
async function eventually(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 250; i++) {
    if (await cond()) return;
    await sleep(20);
  }
  throw new Error(`never: ${what}`);
}

async function started(ttlMs = 600) {
  const inner = new MemoryStore();
  const store = faultyStore(inner);
  const metrics = createMetrics({ defaultMetrics: false });
  const sessions = new GatewaySessions(store, metrics, log, { ttlMs });
  await sessions.start();
  return { inner, store, metrics, sessions };
}

describe('GatewaySessions', () => {
  it('stays valid while beats are acknowledged, and beats count up in the store', async () => {
    const { inner, sessions } = await started();
    const lease = sessions.current();
    expect(lease).not.toBeNull();
    await sleep(700); // longer than the TTL: only beats keep it valid
    expect(sessions.current()).toBe(lease);
    const record = (await inner.readSessions([lease?.id ?? ''])).get(lease?.id ?? '');
    expect(record?.ttlMs).toBe(600);
    expect(record?.beat).toBeGreaterThanOrEqual(3);
    await sessions.close();
    expect(await inner.readSessions([lease?.id ?? ''])).toEqual(new Map()); // ended on close
  });

  it('lapses when beats fail, aborting what it tracks, and is valid again once they succeed', async () => {
    const { store, sessions } = await started();
    const lease = sessions.current();
    let aborted = 0;
    lease?.track(() => aborted++);
    store.failing.add('beatSession');
    await sleep(600);
    expect(sessions.current()).toBeNull();
    expect(lease?.valid).toBe(false);
    expect(aborted).toBe(1);
    store.failing.clear();
    await eventually('valid again', () => sessions.current() !== null);
    expect(sessions.current()).toBe(lease); // nobody ended it: the same session goes on
    await sessions.close();
  });

  it('opens a new session when another gateway ended this one, and never revives the old', async () => {
    const { inner, metrics, sessions } = await started();
    const old = sessions.current();
    let aborted = 0;
    old?.track(() => aborted++);
    const beat = (await inner.readSessions([old?.id ?? ''])).get(old?.id ?? '')?.beat ?? -1;
    // Ending with a stale beat fails; with the current one it succeeds (the compare).
    await sleep(150);
    expect(await inner.endSession(old?.id ?? '', beat)).toBe(false);
    const now = (await inner.readSessions([old?.id ?? ''])).get(old?.id ?? '')?.beat ?? -1;
    expect(await inner.endSession(old?.id ?? '', now)).toBe(true);
    await eventually(
      'a new session',
      () => sessions.current()?.id !== old?.id && sessions.current() !== null,
    );
    const fresh = sessions.current();
    expect(fresh).not.toBeNull();
    expect(fresh?.id).not.toBe(old?.id);
    expect(old?.ended).toBe(true);
    expect(old?.valid).toBe(false);
    expect(aborted).toBe(1);
    expect((await metrics.sessionsLost.get()).values[0]?.value).toBe(1);
    await sessions.close();
  });
});

describe('SessionLease.track', () => {
  it('aborts what is tracked once; an unregistered forward is not aborted, and slots are reused', () => {
    const lease = new SessionLease('s');
    const aborted: string[] = [];
    const untrackA = lease.track(() => aborted.push('a'));
    const untrackB = lease.track(() => aborted.push('b'));
    expect(lease.tracked).toBe(2);
    untrackA();
    untrackA(); // twice: harmless
    expect(lease.tracked).toBe(1);
    const untrackC = lease.track(() => aborted.push('c')); // takes a's slot
    lease.abortAll();
    expect(aborted.sort()).toEqual(['b', 'c']);
    expect(lease.tracked).toBe(0);
    const untrackD = lease.track(() => aborted.push('d')); // may take b's or c's old slot
    untrackB(); // after abortAll: never removes d
    untrackC();
    expect(lease.tracked).toBe(1);
    lease.abortAll();
    expect(aborted.sort()).toEqual(['b', 'c', 'd']);
    untrackD();
    expect(lease.tracked).toBe(0);
  });
});

describe('SessionObserver', () => {
  it('ends a session only after seeing its beat unchanged for its TTL', async () => {
    const inner = new MemoryStore();
    const observer = new SessionObserver(inner, log);
    await inner.openSession('alive', 1000);
    await inner.openSession('silent', 1000);
    const beating = setInterval(() => void inner.beatSession('alive'), 40);
    const started = performance.now();
    const first = await observer.judge(['alive', 'silent', 'unknown']);
    expect(first.dead).toEqual(['unknown']);
    expect(first.retryInMs).toBeLessThanOrEqual(1000);
    await sleep(100);
    const early = await observer.judge(['alive', 'silent']);
    if (performance.now() - started < 1000) expect(early.dead).toEqual([]); // not yet a TTL of silence
    await eventually('silent ended', async () =>
      (await observer.judge(['alive', 'silent'])).dead.includes('silent'),
    );
    expect(performance.now() - started).toBeGreaterThanOrEqual(1000);
    clearInterval(beating);
    expect([...(await inner.readSessions(null)).keys()]).toEqual(['alive']);
  });
});
