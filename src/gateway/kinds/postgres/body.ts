/**
 * Reading a write's JSON body, bounded: the kind executes the write itself, so it reads
 * the body (the http kind streams it instead). Over the limit → 413 without reading
 * further; not JSON → 400 invalid-row. Nothing is written in either case.
 */
import type { Readable } from 'node:stream';
import { ProblemError } from '../../../errors.js';
import { invalidRow } from './refusals.js';
import type { Checked } from './row-input.js';

/** Default limit on a row write's body. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

export async function readJsonBody(
  stream: Readable,
  contentLength: string | undefined,
  limit = BODY_LIMIT_BYTES,
): Promise<Checked<unknown>> {
  const tooLarge = (): Checked<unknown> => ({
    ok: false,
    problem: new ProblemError('payload-too-large', `a row write's body is limited to ${limit} bytes`, {
      limit,
    }),
  });
  if (contentLength !== undefined && /^[0-9]+$/.test(contentLength) && Number(contentLength) > limit) {
    return tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buf.length;
    if (size > limit) return tooLarge();
    chunks.push(buf);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return { ok: false, problem: invalidRow('the body is empty; send a JSON object') };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false, problem: invalidRow('the body is not valid JSON') };
  }
}
