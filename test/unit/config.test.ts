import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULTS, parseHostPort, resolveConfig } from '../../src/config.js';
import { checkLockKey } from '../../src/lock-keys.js';

describe('config', () => {
  it('has the documented defaults', () => {
    const c = resolveConfig({});
    expect(c.store).toBe('./.fencegate');
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(c.control).toEqual({ host: '127.0.0.1', port: 9090 });
    expect(c.policies).toBe('./policies');
    expect(Object.isFrozen(c)).toBe(true);
    expect(DEFAULTS.listen.port).toBe(8080);
  });

  it('layers file < environment < flags', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'fencegate.yaml');
    await writeFile(
      file,
      'store: /from/file\nlisten: 127.0.0.1:1000\ncontrol: "[::1]:2000"\nmaxTtlMs: 60000\n',
    );
    const c = resolveConfig({
      file,
      env: { FENCEGATE_LISTEN: '127.0.0.1:1001', FENCEGATE_STORE: 'redis://env' },
      flags: { store: 'postgres://flag' },
    });
    expect(c.store).toBe('postgres://flag');
    expect(c.listen.port).toBe(1001);
    expect(c.control).toEqual({ host: '::1', port: 2000 });
    expect(c.maxTtlMs).toBe(60000);
  });

  it('sequencerKeys: none by default, from file, environment or flag', async () => {
    expect(resolveConfig({}).sequencerKeys).toBeNull();
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'sequencerKeys: /etc/fencegate/keys.json\n');
    expect(resolveConfig({ file }).sequencerKeys).toBe('/etc/fencegate/keys.json');
    expect(resolveConfig({ file, env: { FENCEGATE_SEQUENCER_KEYS: '/env.json' } }).sequencerKeys).toBe(
      '/env.json',
    );
    expect(resolveConfig({ file, flags: { sequencerKeys: '/flag.json' } }).sequencerKeys).toBe('/flag.json');
  });

  it('names the file, line and field of a bad setting', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'store: x\nlisen: 1.2.3.4:5\n');
    expect(() => resolveConfig({ file })).toThrow(new RegExp(`${file}:2:1: lisen: unknown setting`));
    await writeFile(file, 'store: x\nlisten: nope\n');
    expect(() => resolveConfig({ file })).toThrow(new RegExp(`${file}:2:1: listen: "nope" is not HOST:PORT`));
    await writeFile(file, 'store: [1, 2\n');
    expect(() => resolveConfig({ file })).toThrow(ConfigError);
    expect(() => resolveConfig({ file: join(dir, 'missing.yaml') })).toThrow(/cannot read config file/);
  });

  it('accepts the known store schemes and plain paths, and nothing else', () => {
    for (const store of [
      'redis://127.0.0.1:6379',
      'rediss://h:6380/0',
      'postgres://u@h/db',
      'postgresql://h/db',
      'etcd://h:2379',
      'etcd://10.0.0.1:2379,10.0.0.2:2379,[::1]:2379',
      'etcds://etcd-0.example:2379,etcd-1.example:2379',
      './data',
      '/var/lib/fencegate',
      'data',
      './etcd:2379',
    ]) {
      expect(resolveConfig({ flags: { store } }).store).toBe(store);
    }
    for (const store of ['etcdv3://h:2379', 'redis+sentinel://a:1', 'Redis:/x', 'file:data', 'c:foo']) {
      expect(() => resolveConfig({ flags: { store } })).toThrow(/--store: .*unknown store scheme/);
    }
    expect(() => resolveConfig({ env: { FENCEGATE_STORE: 'etcdv3://h' } })).toThrow(
      /environment FENCEGATE_STORE: .*unknown store scheme "etcdv3:"/,
    );
    // A Redis Cluster names its nodes (any of them; ioredis finds the rest).
    expect(resolveConfig({ flags: { store: 'redis+cluster://a:7000,b:7001' } }).store).toBe(
      'redis+cluster://a:7000,b:7001',
    );
    expect(() => resolveConfig({ flags: { store: 'redis+cluster://a:x' } })).toThrow(
      /"a:x" is not host:port/,
    );
    expect(() => resolveConfig({ flags: { store: 'redis+cluster://u:pw@' } })).toThrow(/names no node/);
    expect(() => resolveConfig({ flags: { store: 'redis+cluster://a:1/0' } })).toThrow(
      /no path, query or fragment/,
    );
    // An etcd store names every member with its client port, and nothing else.
    expect(() => resolveConfig({ flags: { store: 'etcd://h' } })).toThrow(/--store: .*"h" is not host:port/);
    expect(() => resolveConfig({ flags: { store: 'etcds://h' } })).toThrow(/--store: .*"h" is not host:port/);
    expect(() => resolveConfig({ flags: { store: 'etcd://a:1,,b:2' } })).toThrow(/"" is not host:port/);
    expect(() => resolveConfig({ flags: { store: 'etcd://h:2379/x' } })).toThrow(
      /no path, query or fragment/,
    );
    expect(() => resolveConfig({ flags: { store: 'mysql://root:secret@h/db' } })).toThrow(/\*\*\*/);
  });

  it('reads the log settings: level, format, access log share', async () => {
    expect(DEFAULTS).toMatchObject({ logLevel: 'info', logFormat: null, accessLog: 1 });
    const flags = (f: Record<string, string>) => resolveConfig({ flags: f });
    expect(flags({ logLevel: 'silent', logFormat: 'pretty', accessLog: 'off' })).toMatchObject({
      logLevel: 'silent',
      logFormat: 'pretty',
      accessLog: 0,
    });
    for (const [given, share] of [
      ['on', 1],
      ['1', 1],
      ['0', 0],
      ['0.25', 0.25],
      ['.5', 0.5],
    ] as const) {
      expect(flags({ accessLog: given }).accessLog).toBe(share);
    }
    for (const bad of ['2', '-0.1', 'half', '1e-2']) {
      expect(() => flags({ accessLog: bad })).toThrow(
        new ConfigError(`--access-log: "${bad}" must be on, off, or a fraction between 0 and 1`),
      );
    }
    expect(() => flags({ logLevel: 'warning' })).toThrow(
      '--log-level: "warning" must be one of fatal|error|warn|info|debug|trace|silent',
    );
    expect(() => resolveConfig({ env: { FENCEGATE_LOG_FORMAT: 'text' } })).toThrow(
      'environment FENCEGATE_LOG_FORMAT: "text" must be one of json|pretty',
    );
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'accessLog: 0.1\nlogLevel: 3\n');
    expect(() => resolveConfig({ file })).toThrow(`${file}:2:1: logLevel: "3" must be one of`);
    await writeFile(file, 'accessLog: 0.1\naccessLog2: x\n');
    expect(() => resolveConfig({ file })).toThrow(/unknown setting/);
    await writeFile(file, 'accessLog: 0.1\nlogFormat: json\n');
    expect(resolveConfig({ file })).toMatchObject({ accessLog: 0.1, logFormat: 'json' });
  });

  it('bounds the gateway session TTL', () => {
    expect(resolveConfig({}).sessionTtlMs).toBe(6000);
    expect(resolveConfig({ flags: { sessionTtlMs: '1000' } }).sessionTtlMs).toBe(1000);
    expect(() => resolveConfig({ flags: { sessionTtlMs: '100' } })).toThrow(/sessionTtlMs/);
  });

  it('admission holds: 50 ms by default, bounded, off on a volatile Redis unless asked for', () => {
    expect(resolveConfig({}).admissionHoldMs).toBe(50);
    expect(resolveConfig({ flags: { admissionHoldMs: '0' } }).admissionHoldMs).toBe(0);
    expect(resolveConfig({ env: { FENCEGATE_ADMISSION_HOLD_MS: '100' } }).admissionHoldMs).toBe(100);
    expect(() => resolveConfig({ flags: { admissionHoldMs: '1001' } })).toThrow(/admissionHoldMs/);
    expect(() => resolveConfig({ flags: { admissionHoldMs: '-1' } })).toThrow(/admission-hold-ms/);
    expect(resolveConfig({ flags: { allowVolatileRedis: true } }).admissionHoldMs).toBe(0);
    const asked = { allowVolatileRedis: true, admissionHoldMs: '10' };
    expect(resolveConfig({ flags: asked }).admissionHoldMs).toBe(10);
  });

  it('the refusal lane: on by default, off by flag, environment or file', async () => {
    expect(resolveConfig({}).refusalLane).toBe(true);
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'refusalLane: false\n');
    expect(resolveConfig({ file }).refusalLane).toBe(false);
    await rm(dir, { recursive: true, force: true });
    expect(resolveConfig({ flags: { refusalLane: 'off' } }).refusalLane).toBe(false);
    expect(resolveConfig({ env: { FENCEGATE_REFUSAL_LANE: 'false' } }).refusalLane).toBe(false);
    expect(() => resolveConfig({ flags: { refusalLane: 'sometimes' } })).toThrow(/--refusal-lane/);
  });

  it('names the variable or flag of a bad value', () => {
    expect(() => resolveConfig({ env: { FENCEGATE_CONTROL: 'x' } })).toThrow(/environment FENCEGATE_CONTROL/);
    expect(() => resolveConfig({ flags: { allowVolatileRedis: 'maybe' } })).toThrow(/--allow-volatile-redis/);
  });

  it('takes the store breaker settings from file, environment and flags, within bounds', async () => {
    expect(resolveConfig({})).toMatchObject({ storeTimeoutMs: 2000, storeResetTimeoutMs: 5000 });
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'storeTimeoutMs: 750\nstoreResetTimeoutMs: 20000\n');
    expect(resolveConfig({ file })).toMatchObject({ storeTimeoutMs: 750, storeResetTimeoutMs: 20000 });
    const c = resolveConfig({
      file,
      env: { FENCEGATE_STORE_TIMEOUT_MS: '500' },
      flags: { storeResetTimeoutMs: '30000' },
    });
    expect(c).toMatchObject({ storeTimeoutMs: 500, storeResetTimeoutMs: 30000 });
    expect(() => resolveConfig({ flags: { storeTimeoutMs: 'soon' } })).toThrow(
      /--store-timeout-ms: "soon" must be an integer/,
    );
    expect(() => resolveConfig({ env: { FENCEGATE_STORE_TIMEOUT_MS: '5' } })).toThrow(
      /storeTimeoutMs must lie between 10 and 60000/,
    );
    expect(() => resolveConfig({ flags: { storeResetTimeoutMs: '50' } })).toThrow(
      /storeResetTimeoutMs must lie between 100 and 3600000/,
    );
  });

  it.each([
    ['127.0.0.1:0', { host: '127.0.0.1', port: 0 }],
    [':8080', { host: '127.0.0.1', port: 8080 }],
    ['[::1]:9', { host: '::1', port: 9 }],
    ['localhost:65535', { host: 'localhost', port: 65535 }],
  ])('parses %s', (s, v) => expect(parseHostPort(s, 'x')).toEqual(v));

  it.each(['8080', 'host:', 'host:65536', '::1:80', 'a:b'])('refuses %s', (s) => {
    expect(() => parseHostPort(s, 'x')).toThrow(ConfigError);
  });
});

describe('lock keys', () => {
  it.each(['order:42', 'a', 'k'.repeat(256), 'ключ', '{tag}', 'a/b c'])('accepts %j', (k) => {
    expect(checkLockKey(k).ok).toBe(true);
  });
  it.each(['', 'k'.repeat(257), 'a\nb', 'a\u0000', 'a\u007f', '\ud800', 'é'.repeat(129), 'bad\ufffd'])(
    'refuses %j',
    (k) => expect(checkLockKey(k).ok).toBe(false),
  );
});
