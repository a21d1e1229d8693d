/** Lock key rules: 1–256 bytes of printable UTF-8, no control characters. */
export const MAX_KEY_BYTES = 256;

// C0 and C1 controls, DEL, and lone surrogates (which cannot be valid UTF-8).
const FORBIDDEN =
  // eslint-disable-next-line no-control-regex
  /[\u0000-\u001f\u007f-\u009f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export type KeyCheck = { ok: true } | { ok: false; reason: string };

export function checkLockKey(key: string): KeyCheck {
  if (key.length === 0) return { ok: false, reason: 'lock key is empty' };
  if (key.includes('\ufffd')) return { ok: false, reason: 'lock key is not valid UTF-8' };
  if (FORBIDDEN.test(key))
    return { ok: false, reason: 'lock key contains control characters or invalid UTF-16' };
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > MAX_KEY_BYTES)
    return { ok: false, reason: `lock key is ${bytes} bytes; at most ${MAX_KEY_BYTES}` };
  return { ok: true };
}
