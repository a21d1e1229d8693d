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
