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
-- The columns of a table (column.ts reads each row). A domain is followed to its base
-- type, as Postgres does when it reports a result's types: `oid` and `typmod` are what a
-- result reports for the column; `declared` is the column's own type with its modifier
-- (`character(8)`, `numeric(12,2)`, a domain's name). `deterministic`: equal values of
-- the column have equal text (false under a nondeterministic collation).
-- $1 the quoted, optionally schema-qualified table name
WITH RECURSIVE col AS (
  SELECT a.attnum, a.attname, a.atttypid AS typ, a.atttypmod AS mod,
         format_type(a.atttypid, a.atttypmod) AS declared, a.attcollation
    FROM pg_attribute a
   WHERE a.attrelid = to_regclass($1::text)
     AND a.attnum > 0
     AND NOT a.attisdropped
  UNION ALL
  SELECT c.attnum, c.attname, t.typbasetype, t.typtypmod, c.declared, c.attcollation
    FROM col c
    JOIN pg_type t ON t.oid = c.typ
   WHERE t.typtype = 'd'
)
SELECT c.attname::text                         AS name,
       c.typ::int                              AS oid,
       c.mod                                   AS typmod,
       b.typname::text                         AS base_type,
       b.typtype::text                         AS base_kind,
       format_type(b.oid, NULL)                AS base_sql,
       c.declared                              AS declared,
       COALESCE(co.collisdeterministic, true)  AS deterministic
  FROM col c
  JOIN pg_type b ON b.oid = c.typ AND b.typtype <> 'd'
  LEFT JOIN pg_collation co ON co.oid = c.attcollation
 ORDER BY c.attnum;
