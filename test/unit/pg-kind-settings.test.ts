import { describe, expect, it } from 'vitest';
import { compilePostgresRoute, compilePostgresUpstream } from '../../src/gateway/kinds/postgres/settings.js';
import { expandEnv } from '../../src/policy/env.js';

describe('postgres kind settings', () => {
  it('expands ${ENV} in the url (with a default when unset) and names a missing variable', () => {
    const env = { PGPASS: 's3cret', PGHOST: 'db', EMPTY: '' };
    const url = expandEnv('postgres://app:${PGPASS}@${PGHOST}:${PGPORT:-5432}/${EMPTY:-shop}', env);
    expect(url).toEqual({ ok: true, value: 'postgres://app:s3cret@db:5432/shop' });
    const ok = compilePostgresUpstream({ url: url.ok ? url.value : '' });
    expect(ok).toEqual({
      ok: true,
      value: {
        connectionString: 'postgres://app:s3cret@db:5432/shop',
        where: 'postgres://db:5432/shop',
        fenceSchema: 'fencegate',
        pooler: 'none',
        preparedStatements: true,
        poolSize: 10,
        statementTimeoutMs: 5000,
      },
    });
    const missing = expandEnv('postgres://app:${DB_PASSWORD}@db/shop', env);
    expect(missing.ok ? '' : missing.message).toContain('"DB_PASSWORD" is not set');
    expect(expandEnv('${1X}', {})).toMatchObject({ ok: false });
    expect(expandEnv('a${B', {})).toMatchObject({ ok: false });
    expect(expandEnv('no refs', {})).toEqual({ ok: true, value: 'no refs' });
  });

  it('refuses urls that are not postgres, or lack a database; never echoes the expanded url', () => {
    for (const url of ['http://db/shop', 'postgres://db', 'postgres://db/', 'nope', 'postgres://db/shop#x']) {
      const r = compilePostgresUpstream({ url });
      expect(r.ok, url).toBe(false);
    }
    const r = compilePostgresUpstream({ url: 'hunter2 x' });
    expect(JSON.stringify(r)).not.toContain('hunter2');
    expect(compilePostgresUpstream({ url: 'postgres://db/x', fenceSchema: 'pg_x' }).ok).toBe(false);
    // A transaction pooler: settings inside each transaction, statements unnamed unless told.
    expect(compilePostgresUpstream({ url: 'postgres://db/x', pooler: 'transaction' })).toMatchObject({
      ok: true,
      value: { pooler: 'transaction', preparedStatements: false },
    });
    expect(
      compilePostgresUpstream({ url: 'postgres://db/x', pooler: 'transaction', preparedStatements: true }),
    ).toMatchObject({ ok: true, value: { pooler: 'transaction', preparedStatements: true } });
    // preparedStatements: false alone declared a pooler before `pooler` existed, and still does.
    expect(compilePostgresUpstream({ url: 'postgres://db/x', preparedStatements: false })).toMatchObject({
      ok: true,
      value: { pooler: 'transaction', preparedStatements: false },
    });
    expect(
      compilePostgresUpstream({ url: 'postgres://db/x', pooler: 'none', preparedStatements: false }),
    ).toMatchObject({ ok: true, value: { pooler: 'none', preparedStatements: false } });
    // The upstream's timeoutMs is a statement's timeout.
    expect(compilePostgresUpstream({ url: 'postgres://db/x', timeoutMs: 250 })).toMatchObject({
      ok: true,
      value: { statementTimeoutMs: 250 },
    });
    expect(compilePostgresUpstream({ url: 'postgres://db/x', poolSize: 3 })).toMatchObject({
      ok: true,
      value: { poolSize: 3 },
    });
    expect(compilePostgresUpstream({ url: 'postgres://db/x', fenceSchema: 'fg_test' })).toMatchObject({
      ok: true,
      value: { fenceSchema: 'fg_test' },
    });
  });

  it('compiles row and list routes', () => {
    expect(
      compilePostgresRoute({ table: 'sales.orders', key: 'id', columns: ['status'] }, ['id'], ['GET', 'PUT']),
    ).toEqual({
      ok: true,
      value: { table: { schema: 'sales', name: 'orders' }, key: 'id', columns: ['status'], shape: 'row' },
    });
    expect(compilePostgresRoute({ table: 'orders', key: 'id', columns: [] }, [], ['GET'])).toMatchObject({
      ok: true,
      value: { shape: 'list', table: { schema: null } },
    });
  });

  it('reports each wrong field', () => {
    const fields = (r: ReturnType<typeof compilePostgresRoute>) => (r.ok ? [] : r.errors.map((e) => e.field));
    expect(fields(compilePostgresRoute({}, ['id'], ['GET']))).toEqual(['table', 'key', 'columns']);
    expect(fields(compilePostgresRoute({ table: 'a.b.c', key: 'id', columns: [] }, ['id'], ['GET']))).toEqual(
      ['table'],
    );
    expect(
      fields(compilePostgresRoute({ table: 't"; drop', key: 'id', columns: [] }, ['id'], ['GET'])),
    ).toEqual(['table']);
    expect(
      fields(
        compilePostgresRoute({ table: 't', key: 'id', columns: ['id', 'a', 'a', 'b c'] }, ['id'], ['GET']),
      ),
    ).toEqual(['columns[0]', 'columns[2]', 'columns[3]']);
    expect(
      fields(compilePostgresRoute({ table: 't', key: 'id', columns: [] }, ['orderId'], ['GET'])),
    ).toEqual(['path']);
    expect(
      fields(compilePostgresRoute({ table: 't', key: 'id', columns: [] }, ['id', 'x'], ['GET'])),
    ).toEqual(['path']);
    expect(fields(compilePostgresRoute({ table: 't', key: 'id', columns: [] }, [], ['GET', 'PUT']))).toEqual([
      'methods',
    ]);
    expect(fields(compilePostgresRoute({ table: 't', key: 'id', columns: [] }, ['id'], ['POST']))).toEqual([
      'methods',
    ]);
    expect(
      fields(
        compilePostgresRoute({ table: 't', key: 'x'.repeat(64), columns: [] }, ['x'.repeat(64)], ['GET']),
      ),
    ).toContain('key');
  });
});
