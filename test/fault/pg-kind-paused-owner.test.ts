/**
 * The paused-owner scenario over `kind: postgres`, ending with the history checker.
 *
 * One `fencegate serve` (lock store: the shared Postgres under a schema of its own, or the
 * shared Redis under a prefix of its own) in front of a table in a random schema, whose
 * AFTER INSERT OR UPDATE trigger appends every applied row change to an audit table in
 * commit order (a bigserial seq; writes under one lock are serialised by the fence row,
 * which the trigger's transaction holds). The trigger also reads the lock's fence
 * (`<fenceSchema>.fences.highest`): inside the write's transaction, right after the
 * gateway's compare-and-set, that is exactly the token the write was admitted with, so
 * the audit records the token the gateway fenced by, not only the one the client put in
 * the row.
 *
 * Owner A, a real child process (clients/paused-owner.mjs with `row: true`, on the built client SDK
 * with auto-renew), acquires order:N with a short TTL and writes the row once; it is
 * SIGSTOPped past its lease; owner B acquires (a higher token) and writes; A is
 * SIGCONTed and writes again at once with its old token: 409 stale-token, the row keeps
 * B's values. The audit table becomes the checker's applied-writes record; with the
 * grants and the client operations it must pass, and the same history with A's stale
 * write applied after B's (a mutation) must not: the test can fail.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  checkHistory,
  formatViolation,
  type AppliedRecord,
  type ClientOperation,
  type GrantRecord,
  type History,
} from '../checker/index.js';
import { injectApplied, swapApplied } from '../checker/mutate.js';
import { dropPostgresSchema, randomNamespace } from '../helpers/e2e.js';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { withPgClient } from '../helpers/sql-fixtures.js';
import {
  HistoryRecorder,
  opId,
  openFaultStore,
  PG_URL,
  startChildClient,
  type ChildClient,
  type FaultStore,
  type StoreKind,
} from './harness/index.js';

const STORES: StoreKind[] = ['postgres', 'redis'];

interface AuditRow {
  seq: string;
  id: string;
  tok: string;
  fence_tok: string | null;
  writer: string;
  req: string;
}

/** The child's grants and write attempts, for the run's history. */
function childRecords(child: ChildClient) {
  return {
    grants: child.events.filter((e) => e.event === 'grant').map((e) => e.grant as GrantRecord),
    operations: child.events.filter((e) => e.event === 'op').map((e) => e.op as ClientOperation),
  };
}

describe.each(STORES)('paused owner over kind: postgres (%s lock store)', (storeKind) => {
  const table = randomNamespace('fgpkpause');
  const fences = randomNamespace('fgpkfence');
  let store: FaultStore | null = null;
  let gateway: FencegateProcess | null = null;
  let child: ChildClient | null = null;
  let dir = '';

  const sql = <T>(text: string, values?: unknown[]) =>
    withPgClient(
      PG_URL,
      async (c) =>
        (await c.query(text.replaceAll('{s}', `"${table}"`).replaceAll('{f}', `"${fences}"`), values))
          .rows as T[],
    );

  beforeAll(async () => {
    await sql(`CREATE SCHEMA {s};
      CREATE TABLE {s}.orders (id bigint PRIMARY KEY, tok bigint NOT NULL, writer text NOT NULL, req text NOT NULL);
      CREATE TABLE {s}.audit (seq bigserial PRIMARY KEY, id bigint NOT NULL, tok bigint NOT NULL,
        fence_tok bigint, writer text NOT NULL, req text NOT NULL);
      CREATE FUNCTION {s}.audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO {s}.audit (id, tok, fence_tok, writer, req)
          VALUES (NEW.id, NEW.tok,
                  (SELECT highest FROM {f}.fences WHERE lock = 'order:' || NEW.id::text),
                  NEW.writer, NEW.req);
          RETURN NULL;
        END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE ON {s}.orders
        FOR EACH ROW EXECUTE FUNCTION {s}.audit_fn();`);
    dir = await tempDir('fg-pgkind-paused-');
    await mkdir(join(dir, 'policies'));
    await writeFile(
      join(dir, 'policies', 'shop.yaml'),
      [
        'version: 1',
        'upstreams:',
        '  shop:',
        '    kind: postgres',
        '    url: postgres://${PGKIND_USER}@127.0.0.1:5432/test',
        `    fenceSchema: ${fences}`,
        'routes:',
        '  - name: order-rows',
        '    methods: [GET, PUT, PATCH, DELETE]',
        '    path: /tables/orders/:id',
        '    upstream: shop',
        `    table: ${table}.orders`,
        '    key: id',
        '    columns: [tok, writer, req]',
        "    lock: 'order:{id}'",
        '',
      ].join('\n'),
    );
    store = await openFaultStore(storeKind);
    gateway = await startFencegate([...store.args, '--policies', join(dir, 'policies')], {
      PGKIND_USER: 'postgres',
    });
  }, 120_000);

  afterEach(async () => {
    await child?.kill();
    child = null;
  });

  afterAll(async () => {
    await child?.kill();
    await gateway?.kill();
    await store?.cleanup();
    await dropPostgresSchema(table);
    await dropPostgresSchema(fences);
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('refuses the woken owner’s row write with its old token; the audit passes the checker', async () => {
    const gw = gateway as FencegateProcess;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const id = String(randomInt(1, 2 ** 47));
    const lock = `order:${id}`;
    const path = `/tables/orders/${id}`;
    const ownerA = `owner-a-${tag}`;
    const ownerB = `owner-b-${tag}`;

    child = startChildClient('paused-owner.mjs', {
      row: true,
      control: gw.control,
      data: gw.data,
      path,
      lock,
      owner: ownerA,
      ttlMs: 600,
      autoRenew: true,
      runId: `pgpaused-${tag}`,
    });
    const grantA = (await child.next('grant')).grant as GrantRecord;
    const first = await child.next('op');
    expect((first.op as ClientOperation).acknowledged, JSON.stringify(first)).toBe(true);
    expect(first.body).toMatchObject({ id, tok: grantA.token, writer: ownerA });
    await child.next('ready');

    child.signal('SIGSTOP'); // renewals stop with it: the lease runs out

    // B queues for the lock and gets it once A's lease has expired.
    const lockB = await history.acquire(gw.control, lock, ownerB, { ttlMs: 10_000, waitMs: 20_000 });
    expect(lockB, 'owner B got the lock after A’s lease expired').not.toBeNull();
    const tokenB = lockB?.fencingToken as string;
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(grantA.token));
    const reqB = opId(ownerB);
    const writeB = await history.write({
      data: gw.data,
      path,
      lock,
      token: tokenB,
      writer: ownerB,
      requestId: reqB,
      body: { tok: tokenB, writer: ownerB, req: reqB },
    });
    expect(writeB.status, JSON.stringify(writeB.body)).toBe(200);

    child.sendLine('wake'); // waiting in the pipe: read the moment the process runs again
    child.signal('SIGCONT');
    await child.next('done');
    const afterPause = child.events.find((e) => e.event === 'op' && e.label === 'after-pause');
    expect(afterPause, JSON.stringify(child.events)).toBeDefined();
    const staleOp = afterPause?.op as ClientOperation;
    const body = afterPause?.body as Record<string, unknown>;
    expect(staleOp.token).toBe(grantA.token);
    expect(staleOp.status, JSON.stringify(body)).toBe(409);
    expect(body.type).toBe('urn:fencegate:stale-token');
    expect(body.token).toBe(grantA.token);
    expect(body.highest).toBe(tokenB);
    expect(await child.exited()).toBe(0);
    history.merge(childRecords(child));
    await lockB?.release();

    // The row keeps B's values, through the gateway and in the table itself.
    const read = await fetch(`${gw.data}${path}`, { signal: AbortSignal.timeout(10_000) });
    expect(read.status).toBe(200);
    expect(await read.json()).toEqual({ id, tok: tokenB, writer: ownerB, req: reqB });
    const [row] = await sql<{ tok: string; writer: string; req: string }>(
      'SELECT tok::text, writer, req FROM {s}.orders WHERE id = $1',
      [id],
    );
    expect(row).toEqual({ tok: tokenB, writer: ownerB, req: reqB });
    // The fence in the target database (the one the refusal is checked against) is B's token.
    const fence = await sql<{ highest: string }>('SELECT highest::text FROM {f}.fences WHERE lock = $1', [
      lock,
    ]);
    expect(fence).toEqual([{ highest: tokenB }]);

    // The audit, in commit order, as the checker's applied-writes record.
    const audit = await sql<AuditRow>(
      `SELECT seq::text, id::text, tok::text, fence_tok::text, writer, req
         FROM {s}.audit WHERE id = $1 ORDER BY seq`,
      [id],
    );
    expect(audit.map((a) => a.writer)).toEqual([ownerA, ownerB]);
    expect(audit.map((a) => a.req)).not.toContain(staleOp.requestId);
    for (const a of audit) expect(a.fence_tok, 'the fence the write was admitted under').toBe(a.tok);
    const applied: AppliedRecord[] = audit.map((a) => ({
      seq: Number(a.seq),
      lock: `order:${a.id}`,
      token: a.fence_tok ?? '',
      writer: a.writer,
      requestId: a.req,
      path: `/tables/orders/${a.id}`,
    }));
    const h: History = { applied, grants: history.grants, operations: history.operations };
    expect(h.grants.map((g) => g.owner)).toEqual(expect.arrayContaining([ownerA, ownerB]));
    expect(h.operations).toHaveLength(3);

    const result = checkHistory(h, { clientRecordComplete: true });
    expect(result.ok, formatViolation(result)).toBe(true);
    if (result.ok) {
      expect(result.stats.applied).toBe(2);
      expect(result.stats.acknowledged).toBe(2);
      expect(result.stats.refused).toBe(1);
      expect(result.stats.joinedByRequestId).toBe(2);
    }

    // The checker would have caught it: A's refused write applied after B's…
    const staleIndex = h.operations.findIndex((o) => o.requestId === staleOp.requestId);
    expect(staleIndex).toBeGreaterThanOrEqual(0);
    const appliedStale = checkHistory(injectApplied(h, staleIndex, h.applied.length, true), {
      clientRecordComplete: true,
    });
    expect(appliedStale.ok).toBe(false);
    if (!appliedStale.ok) expect(appliedStale.violation.kind).toBe('stale-owner');
    // …and so would it if A's first write had committed after B's.
    const reordered = checkHistory(swapApplied(h, 0, 1), { clientRecordComplete: true });
    expect(reordered.ok).toBe(false);
    if (!reordered.ok) expect(reordered.violation.kind).toBe('stale-owner');
  }, 120_000);
});
