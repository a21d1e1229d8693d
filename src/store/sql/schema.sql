-- fencegate SQL schema, shared by the Postgres and the embedded (PGlite) store.
--
-- {schema} is replaced by the quoted schema name (the store's namespace). Run as
-- one transaction under pg_advisory_xact_lock (see queries.sql: init_lock), so
-- several processes starting at once create it exactly once. Every statement is
-- idempotent: it runs on every open.
--
-- Times are bigint milliseconds since the Unix epoch on the store's clock
-- (now_ms()); tokens are bigint, always read back as text.

CREATE SCHEMA IF NOT EXISTS {schema};

-- The store clock. clock_timestamp(), not now(): the time when the statement runs,
-- not when its transaction began.
CREATE OR REPLACE FUNCTION {schema}.now_ms() RETURNS bigint
  LANGUAGE sql VOLATILE
  AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

CREATE TABLE IF NOT EXISTS {schema}.meta (
  name  text PRIMARY KEY,
  value text NOT NULL
);
-- Version 2: in-flight entries belong to gateway sessions (the upgrade from 1 is at
-- the end of this file). A newer version is left alone, and refused by the check.
INSERT INTO {schema}.meta AS m (name, value) VALUES ('schema_version', '2')
ON CONFLICT (name) DO UPDATE SET value = '2' WHERE m.value = '1';

-- The global epoch: one row. Its floor is raised by bumpEpoch() (after restoring a
-- backup); every token minted is above it and admit() refuses tokens at or below
-- it. If the row is missing (state loss), the next open creates it with a floor of
-- the store clock × 1000: above every token the lost state could have issued.
CREATE TABLE IF NOT EXISTS {schema}.epoch (
  singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id         text    NOT NULL,
  floor      bigint  NOT NULL CHECK (floor >= 0),
  started_at bigint  NOT NULL
);
INSERT INTO {schema}.epoch (id, floor, started_at)
VALUES (gen_random_uuid()::text, {schema}.now_ms() * 1000, {schema}.now_ms())
ON CONFLICT (singleton) DO NOTHING;

-- One row per lock key: its token counter, its current lease and the gateway's fence.
-- Every operation on a key locks this row first, so they are serialised per key.
CREATE TABLE IF NOT EXISTS {schema}.locks (
  key        text   PRIMARY KEY,
  -- Key floor: store clock × 1000 when the row was created. The first token is above it.
  floor      bigint NOT NULL,
  -- Highest token minted for the key; NULL while none was (row made by enqueueWaiter).
  issued     bigint,
  -- Highest token admitted by a gateway; NULL while none was.
  highest    bigint,
  -- The current lease, live or lapsed; all NULL when released or never granted.
  lease_id   text,
  owner      text,
  token      bigint,
  ttl_ms     bigint,
  expires_at bigint,
  CHECK ((lease_id IS NULL) = (expires_at IS NULL)),
  CHECK (issued IS NULL OR issued > floor)
);
CREATE INDEX IF NOT EXISTS locks_live ON {schema}.locks (expires_at) WHERE lease_id IS NOT NULL;

-- Idempotency records: a retried acquire with the same (key, request_id, owner)
-- gets the lease first granted for it. Kept until keep_until (≥ max(ttl, 10 min)).
CREATE TABLE IF NOT EXISTS {schema}.grants (
  key        text    NOT NULL,
  request_id text    NOT NULL,
  owner      text    NOT NULL,
  lease_id   text    NOT NULL,
  token      bigint  NOT NULL,
  ttl_ms     bigint  NOT NULL,
  expires_at bigint  NOT NULL,
  took_over  boolean NOT NULL,
  keep_until bigint  NOT NULL,
  PRIMARY KEY (key, request_id, owner)
);
CREATE INDEX IF NOT EXISTS grants_keep_until ON {schema}.grants (keep_until);

-- FIFO waiter queues. seq orders the queue; it is taken while the key's row is
-- locked, so for one key seq order is commit order. A waiter stops counting at
-- its deadline.
CREATE TABLE IF NOT EXISTS {schema}.waiters (
  key       text      NOT NULL,
  waiter_id text      NOT NULL,
  seq       bigserial NOT NULL,
  deadline  bigint    NOT NULL,
  PRIMARY KEY (key, waiter_id)
);
CREATE INDEX IF NOT EXISTS waiters_queue ON {schema}.waiters (key, seq);
CREATE INDEX IF NOT EXISTS waiters_deadline ON {schema}.waiters (deadline);

-- Writes admitted by a gateway and still in flight to the upstream (drain barrier).
-- An entry has no deadline: it counts until it is finished or until the gateway
-- session that owns it ends (docs/adr/0005-gateway-sessions.md).
CREATE TABLE IF NOT EXISTS {schema}.inflight (
  lock       text   NOT NULL,
  request_id text   NOT NULL,
  token      bigint NOT NULL,
  session_id text   NOT NULL,
  PRIMARY KEY (lock, request_id)
);
-- Schema 1 kept a store-clock deadline per entry instead of a session. Its entries
-- cannot be judged any more and are dropped (upgrade every gateway at once).
ALTER TABLE {schema}.inflight ADD COLUMN IF NOT EXISTS session_id text;
DELETE FROM {schema}.inflight WHERE session_id IS NULL;
ALTER TABLE {schema}.inflight ALTER COLUMN session_id SET NOT NULL;
ALTER TABLE {schema}.inflight DROP COLUMN IF EXISTS deadline;
CREATE INDEX IF NOT EXISTS inflight_lower ON {schema}.inflight (lock, token);
CREATE INDEX IF NOT EXISTS inflight_session ON {schema}.inflight (session_id);

-- Gateway sessions: one per gateway process, kept alive by a heartbeat that bumps
-- beat. Other gateways end a session whose beat they saw unchanged for ttl_ms of
-- their own monotonic clock; ending it removes its in-flight entries.
CREATE TABLE IF NOT EXISTS {schema}.gateway_sessions (
  id         text   PRIMARY KEY,
  beat       bigint NOT NULL DEFAULT 0,
  ttl_ms     bigint NOT NULL CHECK (ttl_ms > 0),
  started_at bigint NOT NULL
);

-- Who was granted which token: the last few grants of each key (GRANT_HISTORY in
-- src/store/types.ts; the grant statement trims older rows of the key). Read only to
-- name the owner of a refused token in events, never to decide anything.
CREATE TABLE IF NOT EXISTS {schema}.grant_owners (
  key        text   NOT NULL,
  token      bigint NOT NULL,
  owner      text   NOT NULL,
  PRIMARY KEY (key, token)
);

-- A gateway's fence operations on a batch, in one statement (one transaction, one
-- commit): first `finish` for each (fin_locks[i], fin_ids[i]), then the admissions
-- (a_* arrays, one element per admission), judged exactly as if run one after
-- another in array order. Batches from src/store/sql/batcher.ts; the rule of an
-- admission lives here, its order of checks in docs/stores-sql.md.
--
-- Row locks: the keys of the recorded admissions are locked first, in byte order of
-- the key (COLLATE "C"), so two batches never wait for each other in a cycle; the
-- judgement is a later statement of this function, so (READ COMMITTED, VOLATILE) it
-- reads with a fresh snapshot that sees everything committed before the locks were
-- granted, as the separate lock and read statements of one transaction did before.
-- A recorded admission whose key had no row to lock is forged (nothing was issued).
--
-- Per admission i, for its key: floor = greatest(key floor, epoch floor); h = the
-- key's highest raised by the recorded admissions before i in this batch;
-- token ≤ floor → stale; never issued or token > issued → forged; token < h → stale;
-- a_lease[i] and the key's live lease is not this token → lease-expired; else ok.
-- lower_inflight counts the key's entries of live sessions below the token: the
-- committed ones and those recorded before i in this batch. Returns one row per
-- admission, in array order: (ord, verdict, highest, lower_inflight), highest as text.
-- Versioned name: a change of meaning is a new function, so gateways of two versions
-- sharing a store each call their own.
CREATE OR REPLACE FUNCTION {schema}.fence_batch_v1(
  fin_locks text[], fin_ids text[],
  a_locks text[], a_tokens bigint[], a_lease boolean[], a_ids text[], a_sessions text[],
  a_record boolean[], channel text)
RETURNS TABLE (ord int, verdict text, highest text, lower_inflight int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  locked text[];
BEGIN
  IF cardinality(fin_locks) > 0 THEN
    DELETE FROM {schema}.inflight f
     USING unnest(fin_locks, fin_ids) AS d(lock, request_id)
     WHERE f.lock = d.lock AND f.request_id = d.request_id;
    PERFORM pg_notify(channel, d.lock) FROM (SELECT DISTINCT unnest(fin_locks) AS lock) d;
  END IF;
  IF coalesce(cardinality(a_locks), 0) = 0 THEN
    RETURN;
  END IF;

  SELECT coalesce(array_agg(k.key), '{}') INTO locked
    FROM (SELECT l.key
            FROM {schema}.locks l
           WHERE l.key IN (SELECT u.lock FROM unnest(a_locks, a_record) AS u(lock, rec) WHERE u.rec)
           ORDER BY l.key COLLATE "C"
             FOR UPDATE) k;

  RETURN QUERY
  WITH n AS (
    SELECT {schema}.now_ms() AS now,
           coalesce((SELECT e.floor FROM {schema}.epoch e), 0) AS epoch_floor
  ), req AS (
    SELECT u.ord::int AS ord, u.lock, u.token, u.lease, u.request_id, u.session_id, u.rec
      FROM unnest(a_locks, a_tokens, a_lease, a_ids, a_sessions, a_record)
           WITH ORDINALITY AS u(lock, token, lease, request_id, session_id, rec, ord)
  ), ctx AS (
    SELECT r.*,
           l.key IS NOT NULL AND (NOT r.rec OR l.key = ANY (locked)) AS found,
           greatest(l.floor, n.epoch_floor) AS floor,
           l.issued,
           l.highest AS fence,
           (l.lease_id IS NOT NULL AND l.expires_at > n.now AND l.token = r.token) AS lease_live
      FROM req r
     CROSS JOIN n
      LEFT JOIN {schema}.locks l ON l.key = r.lock
  ), passing AS (
    -- Passes every check that does not depend on the other admissions of the batch.
    SELECT c.*,
           c.found AND c.token > c.floor AND c.issued IS NOT NULL AND c.token <= c.issued
             AND (NOT c.lease OR coalesce(c.lease_live, false)) AS passes
      FROM ctx c
  ), running AS (
    -- The highest when i comes: the key's, raised by earlier recorded admissions that
    -- passed (one that passed but was stale is below it, so taking it changes nothing).
    SELECT p.*,
           greatest(p.fence,
                    max(p.token) FILTER (WHERE p.rec AND p.passes)
                      OVER (PARTITION BY p.lock ORDER BY p.ord
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS h
      FROM passing p
  ), judged AS (
    SELECT r.*,
           CASE
             WHEN NOT r.found THEN 'forged'
             WHEN r.token <= r.floor THEN 'stale'
             WHEN r.issued IS NULL OR r.token > r.issued THEN 'forged'
             WHEN r.h IS NOT NULL AND r.token < r.h THEN 'stale'
             WHEN r.lease AND NOT coalesce(r.lease_live, false) THEN 'lease-expired'
             ELSE 'ok'
           END AS verdict
      FROM running r
  ), counted AS (
    SELECT j.*,
           CASE WHEN j.verdict <> 'ok' THEN 0 ELSE
             (SELECT count(*) FROM {schema}.inflight i
                JOIN {schema}.gateway_sessions s ON s.id = i.session_id
               WHERE i.lock = j.lock AND i.token < j.token)::int
             + (SELECT count(*) FROM judged k
                 WHERE k.lock = j.lock AND k.ord < j.ord AND k.rec AND k.verdict = 'ok'
                   AND k.token < j.token
                   AND EXISTS (SELECT 1 FROM {schema}.gateway_sessions s WHERE s.id = k.session_id))::int
           END AS lower
      FROM judged j
  ), fence AS (
    UPDATE {schema}.locks l
       SET highest = m.top
      FROM (SELECT c.lock, max(c.token) AS top FROM counted c
             WHERE c.rec AND c.verdict = 'ok' GROUP BY c.lock) m
     WHERE l.key = m.lock AND (l.highest IS NULL OR l.highest < m.top)
  ), entry AS (
    INSERT INTO {schema}.inflight (lock, request_id, token, session_id)
    SELECT c.lock, c.request_id, c.token, c.session_id FROM counted c
     WHERE c.rec AND c.verdict = 'ok'
    ON CONFLICT (lock, request_id) DO UPDATE SET token = excluded.token, session_id = excluded.session_id
  )
  SELECT c.ord,
         c.verdict,
         (CASE WHEN c.verdict = 'ok' THEN greatest(c.h, c.token) ELSE c.h END)::text,
         c.lower
    FROM counted c
   ORDER BY c.ord;
END
$fn$;
