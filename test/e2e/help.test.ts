/**
 * `--help` and `-h` on every subcommand of the built CLI (`npm run build` first): exit 0
 * and the command's usage on stdout, nothing on stderr. Usage errors (an unknown flag, a
 * flag without its value) go to stderr with exit 2 and name the flag; bare `fencegate`
 * prints the usage on stderr with exit 2.
 */
import { describe, expect, it } from 'vitest';
import { COMMANDS } from '../../src/cli.js';
import { runCli } from '../helpers/procs.js';

/** Every way a user names a command before asking for help, with the usage line it must print. */
const INVOCATIONS: [string[], string][] = [
  [['serve'], 'fencegate serve [options]'],
  [['check'], 'fencegate check PATH...'],
  [['check', 'policies'], 'fencegate check PATH...'],
  [['init'], 'fencegate init [DIR]'],
  [['epoch'], 'fencegate epoch bump --store S'],
  [['epoch', 'bump'], 'fencegate epoch bump --store S'],
  [['epoch', 'bump', '--store', './nowhere'], 'fencegate epoch bump --store S'],
  [['keys'], 'fencegate keys init|add|promote|prune FILE'],
  [['keys', 'init', 'k.json'], 'fencegate keys init|add|promote|prune FILE'],
  [['keys', 'prune', 'k.json'], 'fencegate keys init|add|promote|prune FILE'],
  [['auth'], 'fencegate auth hash'],
  [['auth', 'hash'], 'fencegate auth hash'],
];

describe('fencegate COMMAND --help', () => {
  it('covers every command', () => {
    expect(new Set(INVOCATIONS.map(([args]) => args[0]))).toEqual(new Set(Object.keys(COMMANDS)));
  });

  it.each(
    INVOCATIONS.flatMap(([args, usage]) =>
      ['--help', '-h'].map((h): [string[], string] => [[...args, h], usage]),
    ),
  )('%j: exit 0, the usage on stdout', async (args, usage) => {
    const r = await runCli(args);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage:\n/);
    expect(r.stdout).toContain(usage);
    expect(r.stdout).toContain('-h, --help');
  });

  it('serve --help lists the settings with their variables and defaults', async () => {
    const r = await runCli(['serve', '--help']);
    for (const text of [
      '--admission-hold-ms N',
      'FENCEGATE_ADMISSION_HOLD_MS',
      '(default 50)',
      '--config FILE',
    ])
      expect(r.stdout).toContain(text);
  });

  it('help COMMAND is COMMAND --help; fencegate --help and help list every command', async () => {
    expect((await runCli(['help', 'epoch'])).stdout).toBe((await runCli(['epoch', '--help'])).stdout);
    for (const args of [['--help'], ['-h'], ['help']]) {
      const r = await runCli(args);
      expect(r.code).toBe(0);
      for (const [, usage] of INVOCATIONS) expect(r.stdout).toContain(usage);
    }
  });

  it('-- ends the options: check -- --help checks a file named --help', async () => {
    const r = await runCli(['check', '--', '--help']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^--help: cannot read/);
  });
});

describe('usage errors', () => {
  it.each([
    [['serve', '--bogus'], 'fencegate: serve: unknown option --bogus; see fencegate serve --help'],
    [
      ['serve', '--store'],
      "fencegate: serve: Option '--store <value>' argument missing; see fencegate serve --help",
    ],
    [
      ['check', '--strict', 'policies'],
      'fencegate: check: unknown option --strict; see fencegate check --help',
    ],
    [
      ['epoch', 'bump', '--store', 'x', '--yes'],
      'fencegate: epoch: unknown option --yes; see fencegate epoch --help',
    ],
    [['auth', 'hash', '--out', 'f'], 'fencegate: auth: unknown option --out; see fencegate auth --help'],
    [['init', '--force'], 'fencegate: init: unknown option --force; see fencegate init --help'],
    [['help', 'frobnicate'], 'fencegate: help: unknown command "frobnicate"; see fencegate --help'],
  ])('%j: exit 2, one line on stderr naming the flag', async (args, message) => {
    const r = await runCli(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`${message}\n`);
  });

  it('bare fencegate: the usage on stderr, exit 2', async () => {
    const r = await runCli([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('Usage:');
    for (const [, usage] of INVOCATIONS) expect(r.stderr).toContain(usage);
  });
});
