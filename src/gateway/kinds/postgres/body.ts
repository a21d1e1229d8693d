/**
 * Reading a write's JSON body, bounded in size and time (http/body.ts): the kind executes
 * the write itself, so it reads the body (the http kind streams it instead). Over the
 * limit → 413 without reading further; too slow → 408; not JSON → 400 invalid-row.
 * Nothing is written in any case.
 */
import type { Readable } from 'node:stream';
import { readBoundedBody } from '../../../http/body.js';
import { invalidRow } from './refusals.js';
import type { Checked } from './row-input.js';

/** Default limit on a row write's body. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

export async function readJsonBody(
  stream: Readable,
  contentLength: string | undefined,
  limits: { maxBytes?: number; idleMs: number; totalMs: number },
): Promise<Checked<unknown>> {
  const read = await readBoundedBody(stream, contentLength, {
    maxBytes: limits.maxBytes ?? BODY_LIMIT_BYTES,
    idleMs: limits.idleMs,
    totalMs: limits.totalMs,
    what: "a row write's body",
  });
  if (!read.ok) return read;
  const text = read.body.toString('utf8');
  if (text.trim() === '') return { ok: false, problem: invalidRow('the body is empty; send a JSON object') };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false, problem: invalidRow('the body is not valid JSON') };
  }
}
