/**
 * `fencegate keys init|add|promote|prune FILE`: the sequencer key file's life cycle.
 * Rotation without downtime is add (publish the next key everywhere), promote (sign with
 * it; the old key is retired but still accepted), prune (drop retired keys once every
 * sequencer they signed has expired). See docs/security.md. Nothing printed here ever
 * contains a private key.
 */
import { parseArgs } from 'node:util';
import {
  addNextKey,
  initKeyFile,
  promoteNextKey,
  pruneRetiredKeys,
  readKeyFile,
  writeKeyFile,
} from './keys.js';

/** Default age before a retired key is pruned: the default longest lease (1 h) plus a minute for reloads. */
export const DEFAULT_PRUNE_AFTER_MS = 3_660_000;

export const KEYS_USAGE =
  'usage: fencegate keys init FILE | add FILE | promote FILE | prune FILE [--older-than-ms N]';

export async function keysCommand(args: string[], out: (line: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: { 'older-than-ms': { type: 'string' } },
  });
  const [verb, path, ...more] = positionals;
  if (path === undefined || more.length > 0) throw new TypeError(KEYS_USAGE);
  if (values['older-than-ms'] !== undefined && verb !== 'prune') throw new TypeError(KEYS_USAGE);
  switch (verb) {
    case 'init': {
      const file = initKeyFile();
      await writeKeyFile(path, file, { exclusive: true });
      out(`${path}: made, signing with key ${file.keys[0]?.kid ?? ''}`);
      return 0;
    }
    case 'add': {
      const r = addNextKey(await readKeyFile(path));
      await writeKeyFile(path, r.file);
      out(
        `${path}: added next key ${r.kid} (published and accepted, not signing). Give this file to every ` +
          'process sharing the store (they reload it on change or SIGHUP), then run: fencegate keys promote',
      );
      return 0;
    }
    case 'promote': {
      const r = promoteNextKey(await readKeyFile(path));
      await writeKeyFile(path, r.file);
      out(
        `${path}: key ${r.kid} signs from now on; ${r.retired} is retired (still accepted). Once every lease ` +
          'it signed for has expired (the longest ttlMs), run: fencegate keys prune',
      );
      return 0;
    }
    case 'prune': {
      const raw = values['older-than-ms'];
      const olderThanMs = raw === undefined ? DEFAULT_PRUNE_AFTER_MS : /^\d+$/.test(raw) ? Number(raw) : NaN;
      if (!Number.isSafeInteger(olderThanMs))
        throw new TypeError('--older-than-ms must be a whole number of ms');
      const r = pruneRetiredKeys(await readKeyFile(path), olderThanMs);
      if (r.removed.length > 0) await writeKeyFile(path, r.file);
      out(
        `${path}: ${r.removed.length === 0 ? 'no retired key old enough to prune' : `pruned ${r.removed.join(', ')}`}`,
      );
      return 0;
    }
    default:
      throw new TypeError(KEYS_USAGE);
  }
}
