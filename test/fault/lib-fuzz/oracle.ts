/**
 * What a response, or an applied write, is allowed to be. The documented problem
 * codes and their statuses are read from docs/errors.md, so the fuzzer checks the
 * contract as written, not as implemented.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AppliedWrite } from '../../../src/sample/index.js';
import { ROOT } from '../../helpers/procs.js';
import type { Tokens } from './env.js';
import type { RawResponse } from './raw-http.js';

/** code → status, from the table in docs/errors.md. */
export function documentedProblems(): Map<string, number> {
  const text = readFileSync(join(ROOT, 'docs', 'errors.md'), 'utf8');
  const map = new Map<string, number>();
  for (const m of text.matchAll(/^\|\s*`([a-z-]+)`\s*\|\s*(\d{3})\s*\|/gm))
    map.set(m[1] as string, Number(m[2]));
  if (map.size < 10)
    throw new Error(`could not read the problem table from docs/errors.md (${map.size} rows)`);
  return map;
}

/** Statuses a client may see: the documented problems, success, interim, and what the upstream passes through. */
export function documentedStatuses(problems: Map<string, number>): Set<number> {
  return new Set([100, 200, 201, 204, ...problems.values()]);
}

export type Verdict =
  | { kind: 'problem'; code: string; status: number }
  /** The sample upstream's own answer, passed through by the gateway. */
  | { kind: 'upstream'; status: number }
  /** A control-listener success. */
  | { kind: 'ok'; status: number }
  /** A response that is wrong but is a known, reported bug (see KNOWN_BUGS). */
  | { kind: 'known-bug'; bug: string; status: number }
  | { kind: 'violation'; why: string; status: number };

/**
 * Known bugs in src/, tolerated by the fuzz loop and pinned by it.fails tests. Empty: the
 * bugs this fuzzer found (KB-1 bad URL not a problem, KB-2 raw '#', KB-3 Expect, KB-4 crash
 * on an abandoned upstream body) are fixed and kept as regression tests.
 */
export const KNOWN_BUGS: Record<string, string> = {};

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

const isObj = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

export function classify(
  listener: 'data' | 'control',
  r: RawResponse,
  problems: Map<string, number>,
  head = false,
): Verdict {
  const status = r.status;
  const ct = (r.headers['content-type'] ?? '').toLowerCase();
  const j = parseJson(r.body);
  if (ct.startsWith('application/problem+json')) {
    if (head && r.body.length === 0) {
      return [...problems.values()].includes(status) && status !== 500
        ? { kind: 'problem', code: '(HEAD)', status }
        : { kind: 'violation', why: `HEAD answered ${status}`, status };
    }
    if (!isObj(j)) return { kind: 'violation', why: 'problem+json body does not parse', status };
    const m = /^urn:fencegate:([a-z-]+)$/.exec(String(j.type));
    const code = m?.[1];
    if (code === undefined || !problems.has(code))
      return { kind: 'violation', why: `undocumented problem type ${String(j.type)}`, status };
    if (problems.get(code) !== status || j.status !== status)
      return {
        kind: 'violation',
        why: `${code} documented as ${problems.get(code)}, sent ${status} (body ${String(j.status)})`,
        status,
      };
    if (code === 'internal') return { kind: 'violation', why: '500 internal: a bug by definition', status };
    if (listener === 'data' && (code === 'upstream-unavailable' || code === 'upstream-timeout'))
      return { kind: 'violation', why: `${code} while the upstream is up and fast`, status };
    return { kind: 'problem', code, status };
  }
  if (listener === 'data') {
    // The sample answers {"error": "..."} (404/405/413) or an order / list / write log (2xx).
    if ([200, 201, 204].includes(status)) return { kind: 'upstream', status };
    if (status === 404 && r.body.length === 0 && ct === '') return { kind: 'upstream', status }; // sample's DELETE of a missing order
    if (
      [404, 405, 413].includes(status) &&
      ((head && r.body.length === 0) || (isObj(j) && Object.keys(j).join() === 'error'))
    )
      return { kind: 'upstream', status };
    return {
      kind: 'violation',
      why: `status ${status} without a problem body (${ct || 'no content-type'})`,
      status,
    };
  }
  if (status === 200) return { kind: 'ok', status };
  return {
    kind: 'violation',
    why: `control: status ${status} without a problem body (${ct || 'no content-type'})`,
    status,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const CANONICAL = /^[1-9][0-9]{0,18}$/;

/**
 * An applied write is legal when the upstream applied it to the resource the gateway
 * fenced, with a token that could be admitted, and with the gateway's own headers only.
 */
export function illegalWrite(
  w: AppliedWrite,
  tokens: Tokens,
  aliases: ReadonlyMap<string, string>,
): string | null {
  if (w.requestId === null || !UUID.test(w.requestId))
    return `x-fencegate-request-id not the gateway's: ${JSON.stringify(w.requestId)}`;
  switch (w.id) {
    case 'open':
      return w.lock === null ? null : `unfenced write carries x-fencegate-lock ${JSON.stringify(w.lock)}`;
    case 'shadowed':
      if (w.lock !== 'shadowed') return `shadow write with lock ${JSON.stringify(w.lock)}`;
      return w.fencingToken === null || CANONICAL.test(w.fencingToken)
        ? null
        : `shadow write forwarded a client Fencing-Token ${JSON.stringify(w.fencingToken)}`;
    case 'leased':
      return w.lock === 'leased' && w.fencingToken === tokens.leased.current
        ? null
        : `leased write applied with lock ${JSON.stringify(w.lock)} token ${JSON.stringify(w.fencingToken)}`;
    case 'tenanted':
      return w.lock === 'tenant:t1' && w.fencingToken === tokens.tenant.current
        ? null
        : `tenanted write applied with lock ${JSON.stringify(w.lock)} token ${JSON.stringify(w.fencingToken)}`;
    default:
      if (w.lock !== `fenced:${w.id}`)
        return `upstream applied order ${JSON.stringify(w.id)} but the gateway fenced lock ${JSON.stringify(w.lock)}`;
      if (w.fencingToken !== (w.id === '1' ? tokens.fenced.current : aliases.get(w.lock)))
        return `fenced write to ${JSON.stringify(w.id)} applied with token ${JSON.stringify(w.fencingToken)}`;
      return null;
  }
}
