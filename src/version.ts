/** fencegate's version, from its package.json (`--version`, fencegate_build_info, /v1/status). */
import { readFileSync } from 'node:fs';

export const VERSION = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
