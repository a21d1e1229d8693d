-- The fixed statements of the postgres kind, one per `-- name:` section. {fences}
-- is the quoted fence schema (default "fencegate"). Every parameter carries an
-- explicit cast; every bigint comes back as text (tokens exceed 2^53). The row
-- statements depend on the route's table and columns and are built in rows-sql.ts.

-- name: fence_table
-- Whether the fence table exists (the DDL below needs CREATE rights: skip it if so).
-- $1 the quoted, schema-qualified table name
SELECT to_regclass($1::text) IS NOT NULL AS present;

-- name: fence_ddl_lock
-- Serialises the fence schema's creation across gateways. $1 the fence schema
SELECT pg_advisory_xact_lock(hashtextextended('fencegate:fences:' || $1::text, 0));

-- name: fence_ddl
CREATE SCHEMA IF NOT EXISTS {fences};
CREATE TABLE IF NOT EXISTS {fences}.fences (
  lock    text PRIMARY KEY,
  highest bigint NOT NULL
);

-- name: fence_highest
-- After a refused compare-and-set (the compare-and-set itself is part of each fenced
-- write's one statement: rows-sql.ts fencedWrite). $1 lock
SELECT highest::text AS highest FROM {fences}.fences WHERE lock = $1::text;

-- name: table_columns
-- The columns of a table, read once per table and cached. A domain's category comes
-- from its base type; the cast stays the domain (its checks apply). The cast has no
-- type modifier: an explicit cast to varchar(5) would silently truncate, while the
-- assignment to the column refuses a value too long (SQLSTATE 22001).
-- $1 the quoted, optionally schema-qualified table name
SELECT a.attname                             AS name,
       format_type(a.atttypid, NULL)         AS sql_type,
       COALESCE(bt.typname, t.typname)::text AS base_type
  FROM pg_attribute a
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
 WHERE a.attrelid = to_regclass($1::text)
   AND a.attnum > 0
   AND NOT a.attisdropped
 ORDER BY a.attnum;
