/**
 * Which key file a serving process uses. Explicit (`--sequencer-keys FILE`): the file
 * must exist (made once with `fencegate keys init FILE` and given to every process that
 * shares the store). Otherwise, on the embedded store, `<dir>/sequencer-keys.json`, made
 * on first start: every worker on that directory reads the same file. On Postgres or
 * Redis without a file, sequencers are off, and the log says so: a key made up by one
 * process would not verify on the others. An embedded key file already there is only
 * read (a start on a full or read-only disk writes nothing it does not need).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { storeKindOf } from '../store/index.js';
import { KeyRing } from './keyring.js';
import { initKeyFile, SequencerKeyError, writeKeyFile } from './keys.js';

export const EMBEDDED_KEY_FILE = 'sequencer-keys.json';

export async function openSequencerKeys(
  configured: string | null,
  storeSpec: string,
  /** `info` for a notice (a key file made), `warn` for what needs an operator (none, a failed reload). */
  log: (level: 'info' | 'warn', line: string) => void,
  opts: { allowReadable?: boolean } = {},
): Promise<KeyRing | null> {
  const onError = (err: unknown) =>
    log(
      'warn',
      `sequencer keys: reload failed, keeping the last good keys: ${err instanceof Error ? err.message : String(err)}`,
    );
  const ringOptions = {
    onError,
    allowReadable: opts.allowReadable ?? false,
    onWarning: (w: string) => log('warn', `sequencer keys: ${w}`),
  };
  if (configured !== null) {
    return KeyRing.open(configured, ringOptions).catch((err: unknown) => {
      const missing = (err as { cause?: { code?: unknown } }).cause?.code === 'ENOENT';
      if (!missing) throw err;
      throw new SequencerKeyError(
        `${(err as Error).message}; make one with: fencegate keys init ${configured} ` +
          '(and give the same file to every process that shares the store)',
      );
    });
  }
  if (storeKindOf(storeSpec) !== 'embedded') {
    log(
      'warn',
      'sequencer keys: none (no --sequencer-keys FILE): acquire and renew answers carry no sequencer, ' +
        'and routes with check: sequencer refuse every write',
    );
    return null;
  }
  const path = join(storeSpec, EMBEDDED_KEY_FILE);
  // A key file already there is read, never written again: a start on a full or read-only
  // disk must not fail making a file it does not need (KeyRing.open checks it is valid).
  if (existsSync(path)) return KeyRing.open(path, ringOptions);
  try {
    await writeKeyFile(path, initKeyFile(), { exclusive: true });
    log('info', `sequencer keys: made ${path}`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  return KeyRing.open(path, ringOptions);
}
