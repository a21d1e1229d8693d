/**
 * The `kind: postgres` row: fenced row writes through the gateway (each one transaction:
 * compare-and-set the lock's fence row, UPDATE the row) against a raw node-postgres loop
 * of `UPDATE … WHERE id = $1` at the same concurrency, on the same server, in one run.
 * Called by run.mjs with its helpers (`run`: its wrk runner, bench/wrk.mjs, whose script sends
 * the same body); loopback only, bounded in time.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';

export async function benchPostgresKind({
  tmp,
  store,
  fencegate,
  stop,
  seconds,
  connections,
  pgUrl,
  locks,
  say,
  run,
}) {
  const schema = `fgbenchkind_${Date.now()}`;
  const admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  await admin.query(`CREATE SCHEMA "${schema}"`);
  await admin.query(`CREATE TABLE "${schema}".rows (id bigint PRIMARY KEY, status text, note text)`);
  await admin.query(
    `INSERT INTO "${schema}".rows (id, status, note) SELECT g, 'new', '' FROM generate_series(0, ${locks - 1}) g`,
  );
  const note = 'x'.repeat(64);
  try {
    // Raw: `connections` workers, each its own UPDATE after the previous one answered.
    say('raw node-postgres UPDATE loop …');
    const pool = new pg.Pool({ connectionString: pgUrl, max: connections });
    const rawFor = async (ms) => {
      let done = 0;
      let n = 0;
      const end = Date.now() + ms;
      const worker = async () => {
        while (Date.now() < end) {
          const id = n++ % locks;
          await pool.query(`UPDATE "${schema}".rows SET status = $2, note = $3 WHERE id = $1`, [
            id,
            'shipped',
            note,
          ]);
          done++;
        }
      };
      await Promise.all(Array.from({ length: connections }, worker));
      return done / (ms / 1000);
    };
    await rawFor(2000);
    const raw = await rawFor(seconds * 1000);
    await pool.end();

    // Through the gateway: PUT /tables/rows/:id with each lock's token.
    const policyDir = join(tmp, 'policies-pgkind');
    await mkdir(policyDir);
    await writeFile(
      join(policyDir, 'rows.yaml'),
      `version: 1
upstreams:
  db:
    kind: postgres
    url: ${pgUrl}
    fenceSchema: ${schema}_fence
routes:
  - name: rows
    methods: [GET, PUT]
    path: /tables/rows/:id
    upstream: db
    table: ${schema}.rows
    key: id
    columns: [status, note]
    lock: "row:{id}"
`,
    );
    const gw = await fencegate(store, policyDir);
    say('fencegate kind: postgres, fenced row writes …');
    const tokens = [];
    for (let i = 0; i < locks; i++) {
      const res = await fetch(`${gw.control}/v1/locks/${encodeURIComponent(`row:${i}`)}/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ owner: 'bench', ttlMs: 3_600_000 }),
      });
      if (res.status !== 200) throw new Error(`acquire failed: ${res.status} ${await res.text()}`);
      tokens.push((await res.json()).token);
    }
    const through = (secs) => run(gw.data, { base: 'tables/rows', tokens, seconds: secs });
    await through(2);
    const r = await through(seconds);
    await stop(gw.child);
    return { raw, gateway: r.rps, p50: r.p50, p99: r.p99, bad: r.bad };
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}_fence" CASCADE`);
    await admin.end();
  }
}
