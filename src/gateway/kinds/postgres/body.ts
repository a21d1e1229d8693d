/**
 * Reading a write's JSON body, bounded in size and time (http/body.ts): the kind executes
 * the write itself, so it reads the body (the http kind streams it instead). Over the
 * limit → 413 without reading further; too slow → 408; not UTF-8, not JSON or not an
 * object → 400 invalid-row (json-body.ts). Nothing is written in any case.
 */
import type { Readable } from 'node:stream';
import { readBoundedBody } from '../../../http/body.js';
import { parseRowObject, type BodyValue } from './json-body.js';
import { invalidRow } from './refusals.js';
import type { Checked } from './row-input.js';

/** Default limit on a row write's body. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/** The body's members, each value with its text as sent. */
export async function readJsonBody(
  stream: Readable,
  contentLength: string | undefined,
  limits: { maxBytes?: number; idleMs: number; totalMs: number },
): Promise<Checked<Map<string, BodyValue>>> {
  const read = await readBoundedBody(stream, contentLength, {
    maxBytes: limits.maxBytes ?? BODY_LIMIT_BYTES,
    idleMs: limits.idleMs,
    totalMs: limits.totalMs,
    what: "a row write's body",
  });
  if (!read.ok) return read;
  const parsed = parseRowObject(read.body);
  return parsed.ok ? { ok: true, value: parsed.members } : { ok: false, problem: invalidRow(parsed.message) };
}
