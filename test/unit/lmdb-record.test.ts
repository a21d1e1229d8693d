/**
 * The embedded store's compact lock record (src/store/lmdb/record.ts): every field comes
 * back as it went in, tokens exact up to 2^63−1 and on either side of the floor, owners
 * repeated by reference; a record of an idle lock is a few bytes; damaged bytes are an
 * error, never a guess.
 */
import { describe, expect, it } from 'vitest';
import { decodeLock, encodeLock, type StoredLock } from '../../src/store/lmdb/record.js';

const idle: StoredLock = {
  floor: '1796390086908000',
  issued: '1796390086908001',
  highest: '1796390086908001',
  shadowHighest: null,
  leaseId: null,
  owner: null,
  token: null,
  ttlMs: null,
  expiresAt: null,
  owners: [['1796390086908001', 'bench']],
  touched: 1796390086950,
};

describe('compact lock record', () => {
  it('round-trips an idle lock in about 20 bytes', () => {
    const bytes = encodeLock(idle);
    expect(bytes.length).toBeLessThanOrEqual(24);
    expect(decodeLock(bytes)).toEqual(idle);
  });

  it('round-trips a held lock with a shadow record, a long history and tokens up to 2^63-1', () => {
    const max = 2n ** 63n - 1n;
    const held: StoredLock = {
      floor: '0',
      issued: max.toString(),
      highest: (max - 5n).toString(),
      shadowHighest: (max - 3n).toString(),
      leaseId: '3f2b8c1e-4d5a-4b6c-8d7e-9f0a1b2c3d4e',
      owner: 'wörker-ü',
      token: max.toString(),
      ttlMs: 3_600_000,
      expiresAt: 1796390090000,
      owners: Array.from({ length: 16 }, (_, i): [string, string] => [
        (max - BigInt(i)).toString(),
        i % 3 === 0 ? '' : `owner-${i % 2}`,
      ]),
      touched: 5,
    };
    expect(decodeLock(encodeLock(held))).toEqual(held);
  });

  it('keeps a token below its floor (a seeded record) exact', () => {
    const odd: StoredLock = {
      ...idle,
      highest: '7',
      owners: [
        ['3', 'a'],
        ['2', 'a'],
      ],
    };
    delete odd.touched;
    expect(decodeLock(encodeLock(odd))).toEqual({ ...odd });
  });

  it('leaves out an empty history', () => {
    const rec = decodeLock(encodeLock({ ...idle, owners: [] }));
    expect(rec.owners).toBeUndefined();
  });

  it('refuses a msgpack record, a truncated one and trailing bytes', () => {
    const bytes = encodeLock(idle);
    expect(() => decodeLock(Buffer.from([0x89, 0xa5]))).toThrow(/not a format-3/);
    expect(() => decodeLock(bytes.subarray(0, bytes.length - 2))).toThrow(/truncated/);
    expect(() => decodeLock(Buffer.concat([bytes, Buffer.from([0])]))).toThrow(/trailing/);
  });
});
