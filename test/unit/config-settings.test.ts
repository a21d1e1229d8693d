/**
 * The settings table (src/settings.ts) and what is derived from it: the settings table in
 * docs/operations.md (written by `npm run docs:settings`) holds the same rows, config
 * resolution takes every setting with the same precedence (flag > environment > config
 * file > default) and names the setting of a value out of range, serve's --help and the
 * README's synopsis list every flag and command, and ServeConfig has the row's type.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { COMMANDS, commandHelp } from '../../src/cli.js';
import {
  DEFAULTS,
  resolveConfig,
  type HostPort,
  type RawSettings,
  type ServeConfig,
} from '../../src/config.js';
import type { LogFormat, LogLevel } from '../../src/observe/log.js';
import {
  DOCS_BEGIN,
  DOCS_END,
  DOCS_HEADER,
  SETTING_ROWS,
  SETTINGS,
  docsCells,
  type SettingKey,
  type SettingRow,
} from '../../src/settings.js';

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase();

/** The cells of a Markdown table's rows: split on unescaped pipes, code spans and escapes removed. */
function markdownCells(table: string): string[][] {
  return table
    .split('\n')
    .filter((l) => l.startsWith('|'))
    .map((l) =>
      l
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((c) =>
          c
            .trim()
            .replace(/\\\|/g, '|')
            .replace(/^`(.*)`$/, '$1'),
        ),
    )
    .filter((cells) => !cells.every((c) => /^-+$/.test(c)));
}

describe('the settings table', () => {
  it('is the table in docs/operations.md, row by row (npm run docs:settings writes it)', () => {
    const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
    const begin = doc.indexOf(DOCS_BEGIN);
    const end = doc.indexOf(DOCS_END);
    expect(begin, 'docs/operations.md lacks the settings:begin marker').toBeGreaterThan(0);
    expect(end).toBeGreaterThan(begin);
    const [header, ...rows] = markdownCells(doc.slice(begin + DOCS_BEGIN.length, end));
    expect(header).toEqual([...DOCS_HEADER]);
    expect(rows.map((r) => r[0])).toEqual(SETTING_ROWS.map(([key]) => key));
    expect(rows).toEqual(docsCells());
  });

  it.each(SETTING_ROWS)('%s: flag and variable named after the key, a well-formed row', (key, row) => {
    if (row.flag !== null) expect(row.flag).toBe(`--${kebab(key)}`);
    if (row.env !== null) expect(row.env).toBe(`FENCEGATE_${snake(key)}`);
    if (row.arg === null) expect(row.type).toBe('bool');
    if (row.helpWith !== undefined) expect(Object.keys(SETTINGS)).toContain(row.helpWith);
    if (row.type === 'int' || row.type === 'workers') {
      expect(row.range).toBeDefined();
      const [min, max] = row.range ?? [0, 0];
      if (typeof row.default === 'number') {
        expect(row.default).toBeGreaterThanOrEqual(min);
        expect(row.default).toBeLessThanOrEqual(max);
      }
    }
    expect(DEFAULTS[key]).toEqual(row.default);
  });

  it('gives ServeConfig the type of each row', () => {
    expectTypeOf<ServeConfig['admissionHoldMs']>().toEqualTypeOf<number>();
    expectTypeOf<ServeConfig['store']>().toEqualTypeOf<string>();
    expectTypeOf<ServeConfig['storeNamespace']>().toEqualTypeOf<string | null>();
    expectTypeOf<ServeConfig['listen']>().toEqualTypeOf<HostPort>();
    expectTypeOf<ServeConfig['health']>().toEqualTypeOf<HostPort | null>();
    expectTypeOf<ServeConfig['refusalLane']>().toEqualTypeOf<boolean>();
    expectTypeOf<ServeConfig['logLevel']>().toEqualTypeOf<LogLevel>();
    expectTypeOf<ServeConfig['logFormat']>().toEqualTypeOf<LogFormat | null>();
    expectTypeOf<ServeConfig['workers']>().toEqualTypeOf<number | null>();
    expectTypeOf<keyof ServeConfig>().toEqualTypeOf<SettingKey>();
  });
});

/** Settings some others need to be valid at all (a certificate needs its key; a store CA, rediss://). */
const COMPANIONS: Partial<Record<SettingKey, Record<string, string>>> = {
  tlsCert: { tlsKey: '/k.pem' },
  tlsKey: { tlsCert: '/c.pem' },
  tlsClientCa: { tlsCert: '/c.pem', tlsKey: '/k.pem' },
  controlTlsCert: { controlTlsKey: '/k.pem' },
  controlTlsKey: { controlTlsCert: '/c.pem' },
  controlTlsClientCa: { controlTlsCert: '/c.pem', controlTlsKey: '/k.pem' },
  storeCa: { store: 'rediss://127.0.0.1:6380' },
  storeCert: { store: 'etcds://127.0.0.1:2379', storeKey: '/k.pem' },
  storeKey: { store: 'rediss://127.0.0.1:6380', storeCert: '/c.pem' },
};

/** Three valid values of a row, for the config file, the environment and the flag; neighbours differ. */
function threeValues(row: SettingRow): [string, string, string] {
  switch (row.type) {
    case 'store':
      return ['./from-file', './from-env', './from-flag'];
    case 'path':
      return ['/from/file', '/from/env', '/from/flag'];
    case 'namespace':
      return ['fromfile', 'fromenv', 'fromflag'];
    case 'hostport':
      return ['127.0.0.1:1001', '127.0.0.1:1002', '127.0.0.1:1003'];
    case 'bool':
      return row.default === true ? ['false', 'true', 'false'] : ['true', 'false', 'true'];
    case 'int': {
      const d = typeof row.default === 'number' ? row.default : 0;
      return [String(d + 1), String(d + 2), String(d + 3)];
    }
    case 'logLevel':
      return ['warn', 'error', 'debug'];
    case 'logFormat':
      return ['json', 'pretty', 'json'];
    case 'share':
      return ['0.1', '0.2', '0.3'];
    case 'workers':
      return ['2', '3', '4'];
    case 'hosts':
      return ['from-file.example', 'from-env.example', 'from-flag.example'];
  }
}

describe('config resolution, for every setting', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fg-settings-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  async function configFile(name: string, settings: Record<string, string>): Promise<string> {
    const file = join(dir, `${name}.yaml`);
    await writeFile(
      file,
      Object.entries(settings)
        .map(([k, v]) => `${k}: ${JSON.stringify(v)}\n`)
        .join(''),
    );
    return file;
  }

  it.each(SETTING_ROWS)('%s: flag > environment > config file > default', async (key, row) => {
    const [fromFile, fromEnv, fromFlag] = threeValues(row);
    const companions = COMPANIONS[key] ?? {};
    const alone = (value: string) => resolveConfig({ flags: { ...companions, [key]: value } })[key];
    const file = await configFile(key, { ...companions, [key]: fromFile });
    const env = row.env === null ? {} : { [row.env]: fromEnv };
    const flags: RawSettings = { [key]: fromFlag };

    expect(resolveConfig({ file, env, flags })[key]).toEqual(alone(fromFlag));
    if (row.env !== null) {
      expect(resolveConfig({ file, env })[key]).toEqual(alone(fromEnv));
      expect(alone(fromEnv)).not.toEqual(alone(fromFlag));
    }
    expect(resolveConfig({ file })[key]).toEqual(alone(fromFile));
    expect(alone(fromFile)).not.toEqual(row.env === null ? alone(fromFlag) : alone(fromEnv));
    expect(resolveConfig({})[key]).toEqual(row.default);
  });

  it.each(SETTING_ROWS.filter(([, row]) => row.range !== undefined))(
    '%s: a value above its range names the setting or where it came from',
    async (key, row) => {
      const above = String((row.range?.[1] ?? 0) + 1);
      if (row.flag !== null) {
        expect(() => resolveConfig({ flags: { [key]: above } })).toThrow(row.flag);
      }
      const variable = row.env;
      if (variable !== null) expect(() => resolveConfig({ env: { [variable]: above } })).toThrow(variable);
      const file = await configFile(`${key}-above`, { [key]: above });
      expect(() => resolveConfig({ file })).toThrow(new RegExp(`${file}:1:1: ${key}`));
    },
  );

  it('names the setting and its source for a value that parses but is out of the row’s range', () => {
    expect(() => resolveConfig({ flags: { admissionHoldMs: '1001' } })).toThrow(
      'admissionHoldMs must lie between 0 and 1000 (--admission-hold-ms: "1001")',
    );
    expect(() => resolveConfig({ env: { FENCEGATE_SESSION_TTL_MS: '299' } })).toThrow(
      'sessionTtlMs must lie between 300 and 600000 (environment FENCEGATE_SESSION_TTL_MS: "299")',
    );
    // The value that wins is checked: a bad file value under a good flag is overridden, as before.
    expect(
      resolveConfig({ env: { FENCEGATE_STORE_TIMEOUT_MS: '5' }, flags: { storeTimeoutMs: '50' } }),
    ).toMatchObject({ storeTimeoutMs: 50 });
  });
});

describe('derived from the table', () => {
  it("serve's --help lists every flag and variable; epoch bump's, the store flags", () => {
    const serve = commandHelp('serve');
    for (const [key, row] of SETTING_ROWS) {
      if (row.flag !== null) expect(serve).toContain(row.arg === null ? row.flag : `${row.flag} ${row.arg}`);
      if (row.env !== null) expect(serve).toContain(row.env);
      if (row.flag === null) expect(serve).toContain(key);
    }
    const epoch = commandHelp('epoch');
    for (const flag of [
      '--store ',
      '--store-namespace',
      '--store-ca',
      '--store-cert',
      '--store-key',
      '--allow-volatile-redis',
      '--force',
    ])
      expect(epoch).toContain(flag);
  });

  it("the README's synopsis has every command (its serve options are serve --help's and the docs' table)", () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const synopsis = /## Running it\n\n```\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    for (const command of Object.keys(COMMANDS)) expect(synopsis).toContain(`fencegate ${command}`);
    expect(readme).toContain('(docs/operations.md#settings)');
  });
});
