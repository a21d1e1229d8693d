/**
 * The embedded store's lock record on disk (format 3): one record per lock, holding the
 * lock (floor, issued, fence, shadow record, lease) and its grant history, laid out by
 * hand. It replaces format 2's two msgpack records per lock (`locks`: a map that repeated
 * its nine field names and wrote tokens as 16-digit strings; `owners`: the history), which
 * cost ~430 bytes of data file per lock, every lock ever seen (issue 30; measured in
 * docs/adr/0022-compact-lock-records.md).
 *
 * Layout, every integer an unsigned LEB128 varint unless said:
 *
 *   tag     1 byte, RECORD_TAG (msgpack never starts a map with it)
 *   flags   varint: which of the optional fields follow (FIELD bits)
 *   floor   the key floor
 *   issued, highest, shadowHighest, token: zigzag varint, as the difference from floor
 *           (a token is floor + a few, so one or two bytes)
 *   leaseId, owner: string (varint byte length, UTF-8)
 *   ttlMs, expiresAt: varint (whole ms)
 *   touched zigzag varint: ms of the last write, as the difference from floor / 1000
 *   owners  varint count, then per grant, newest first: token (zigzag difference from
 *           floor) and owner as varint (byte length + 1) and UTF-8, or 0 for "the owner of
 *           the grant before it in the list"
 *
 * Tokens are bigint throughout (exact up to 2^63−1). Decoding checks the tag and that the
 * record ends where its fields do: anything else is an error, never a guess.
 */
export interface LockRec {
  /** Key floor: store clock × 1000 when the record was created. The first token is above it. */
  floor: string;
  /** Highest token minted; null while none was (record made by enqueueWaiter). */
  issued: string | null;
  /** Highest token admitted by a gateway; null while none was. */
  highest: string | null;
  /** Highest token admitted by shadow-mode routes (absent in format 1); null while none was. */
  shadowHighest?: string | null;
  /** The current lease, live or lapsed; all null when released or never granted. */
  leaseId: string | null;
  owner: string | null;
  token: string | null;
  ttlMs: number | null;
  expiresAt: number | null;
}

/** First byte of a format-3 lock record. */
export const RECORD_TAG = 0x03;

/** A lock record as the embedded store keeps it: the lock and its last grants, newest first. */
export interface StoredLock extends LockRec {
  owners?: [string, string][];
  /** Store-clock ms of the record's last write: when it became idle (retirement, ./retire.ts). */
  touched?: number;
}

const FIELD = {
  issued: 1,
  highest: 2,
  shadowHighest: 4,
  leaseId: 8,
  owner: 16,
  token: 32,
  ttlMs: 64,
  expiresAt: 128,
  owners: 256,
  touched: 512,
} as const;

class Writer {
  private buf = Buffer.allocUnsafe(64);
  private at = 0;

  private room(n: number): void {
    if (this.at + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + n));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }

  byte(b: number): void {
    this.room(1);
    this.buf[this.at++] = b;
  }

  big(v: bigint): void {
    if (v < 0n) throw new RangeError('embedded store record: a negative varint');
    let x = v;
    do {
      const low = Number(x & 0x7fn);
      x >>= 7n;
      this.byte(x > 0n ? low | 0x80 : low);
    } while (x > 0n);
  }

  int(v: number): void {
    if (!Number.isSafeInteger(v) || v < 0)
      throw new RangeError(`embedded store record: not a whole ms count: ${v}`);
    this.big(BigInt(v));
  }

  /** A signed difference, zigzag: 0, -1, 1, -2 … → 0, 1, 2, 3 … */
  diff(v: bigint): void {
    this.big(v >= 0n ? v << 1n : (-v << 1n) - 1n);
  }

  text(s: string, plus = 0): void {
    const n = Buffer.byteLength(s);
    this.int(n + plus);
    this.room(n);
    this.at += this.buf.write(s, this.at, 'utf8');
  }

  done(): Buffer {
    return this.buf.subarray(0, this.at);
  }
}

class Reader {
  private at = 0;
  constructor(private readonly buf: Uint8Array) {}

  byte(): number {
    const b = this.buf[this.at++];
    if (b === undefined) throw new Error('embedded store record: truncated');
    return b;
  }

  big(): bigint {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const b = this.byte();
      v |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return v;
      shift += 7n;
      if (shift > 70n) throw new Error('embedded store record: varint too long');
    }
  }

  int(): number {
    const v = this.big();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error('embedded store record: number out of range');
    return Number(v);
  }

  diff(): bigint {
    const z = this.big();
    return (z & 1n) === 0n ? z >> 1n : -((z + 1n) >> 1n);
  }

  textOf(n: number): string {
    if (this.at + n > this.buf.length) throw new Error('embedded store record: truncated');
    const s = Buffer.from(this.buf.buffer, this.buf.byteOffset + this.at, n).toString('utf8');
    this.at += n;
    return s;
  }

  text(): string {
    return this.textOf(this.int());
  }

  end(): void {
    if (this.at !== this.buf.length) throw new Error('embedded store record: trailing bytes');
  }
}

function flagsOf(l: StoredLock): number {
  let f = 0;
  if (l.issued !== null) f |= FIELD.issued;
  if (l.highest !== null) f |= FIELD.highest;
  if (l.shadowHighest != null) f |= FIELD.shadowHighest;
  if (l.leaseId !== null) f |= FIELD.leaseId;
  if (l.owner !== null) f |= FIELD.owner;
  if (l.token !== null) f |= FIELD.token;
  if (l.ttlMs !== null) f |= FIELD.ttlMs;
  if (l.expiresAt !== null) f |= FIELD.expiresAt;
  if (l.owners !== undefined && l.owners.length > 0) f |= FIELD.owners;
  if (l.touched !== undefined) f |= FIELD.touched;
  return f;
}

export function encodeLock(l: StoredLock): Buffer {
  const w = new Writer();
  const floor = BigInt(l.floor);
  const f = flagsOf(l);
  w.byte(RECORD_TAG);
  w.int(f);
  w.big(floor);
  if (l.issued !== null) w.diff(BigInt(l.issued) - floor);
  if (l.highest !== null) w.diff(BigInt(l.highest) - floor);
  if (l.shadowHighest != null) w.diff(BigInt(l.shadowHighest) - floor);
  if (l.leaseId !== null) w.text(l.leaseId);
  if (l.owner !== null) w.text(l.owner);
  if (l.token !== null) w.diff(BigInt(l.token) - floor);
  if (l.ttlMs !== null) w.int(l.ttlMs);
  if (l.expiresAt !== null) w.int(l.expiresAt);
  if (l.touched !== undefined) w.diff(BigInt(l.touched) - floor / 1000n);
  if ((f & FIELD.owners) !== 0 && l.owners !== undefined) {
    w.int(l.owners.length);
    let previous: string | null = null;
    for (const [token, owner] of l.owners) {
      w.diff(BigInt(token) - floor);
      if (owner === previous) w.int(0);
      else w.text(owner, 1);
      previous = owner;
    }
  }
  return w.done();
}

export function decodeLock(bytes: Uint8Array): StoredLock {
  const r = new Reader(bytes);
  if (r.byte() !== RECORD_TAG) throw new Error('embedded store record: not a format-3 lock record');
  const f = r.int();
  const floor = r.big();
  const token = (bit: number): string | null => ((f & bit) !== 0 ? (floor + r.diff()).toString() : null);
  const issued = token(FIELD.issued);
  const highest = token(FIELD.highest);
  const shadowHighest = token(FIELD.shadowHighest);
  const leaseId = (f & FIELD.leaseId) !== 0 ? r.text() : null;
  const owner = (f & FIELD.owner) !== 0 ? r.text() : null;
  const leaseToken = token(FIELD.token);
  const ttlMs = (f & FIELD.ttlMs) !== 0 ? r.int() : null;
  const expiresAt = (f & FIELD.expiresAt) !== 0 ? r.int() : null;
  const touched = (f & FIELD.touched) !== 0 ? Number(floor / 1000n + r.diff()) : undefined;
  const rec: StoredLock = {
    floor: floor.toString(),
    issued,
    highest,
    shadowHighest,
    leaseId,
    owner,
    token: leaseToken,
    ttlMs,
    expiresAt,
  };
  if (touched !== undefined) rec.touched = touched;
  if ((f & FIELD.owners) !== 0) rec.owners = decodeOwners(r, floor);
  r.end();
  return rec;
}

function decodeOwners(r: Reader, floor: bigint): [string, string][] {
  const n = r.int();
  const out: [string, string][] = [];
  let previous: string | null = null;
  for (let i = 0; i < n; i++) {
    const token = (floor + r.diff()).toString();
    const len = r.int();
    if (len === 0 && previous === null)
      throw new Error('embedded store record: an owner refers to none before it');
    const owner: string = len === 0 && previous !== null ? previous : r.textOf(len - 1);
    out.push([token, owner]);
    previous = owner;
  }
  return out;
}

/** The lmdb encoder of the `locks` table (a Database option: `encoder`). */
export const lockCodec = {
  encode: (l: StoredLock): Buffer => encodeLock(l),
  decode: (bytes: Uint8Array): StoredLock => decodeLock(bytes),
};
