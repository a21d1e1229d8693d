/**
 * The Host allow-list of the control listener (and so of the dashboard it serves): the
 * defence against DNS rebinding. A page at `http://rebind.example:9090` whose name an
 * attacker's DNS later points at 127.0.0.1 is, to the browser, same-origin with the
 * control listener on the victim's machine: it can take locks and read tokens with no
 * CORS in the way. What it cannot change is the `Host` its requests carry, which is the
 * attacker's name; so a listener that answers only for the names it is known by cannot be
 * reached that way (etcd's `--host-whitelist`, Consul's Host check).
 *
 * Without an auth file the listener answers only for `localhost` and loopback IP
 * literals (127.0.0.0/8, ::1), plus its own bind address when that is an IP literal, and
 * the names the operator lists (`--allowed-hosts`). With an auth file nothing is checked
 * unless the operator lists names (a key in the page's hands is needed anyway). `*` in
 * the list turns the check off. docs/security.md, "DNS rebinding".
 */
import { isIP } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { ProblemError } from '../errors.js';

export interface HostAllowList {
  /** Whether a request naming `hostHeader` (the header as sent, port included) is answered. */
  allows(hostHeader: string | undefined): boolean;
}

/** One entry: a DNS name (letters, digits, `-`, `.`), an IP literal (IPv6 with or without brackets), or `*`. */
const NAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

/** Why `entry` cannot be an allowed host, or null. */
export function allowedHostProblem(entry: string): string | null {
  const h = normalise(entry);
  if (h === '*' || isIP(h) !== 0 || NAME.test(h)) return null;
  return `"${entry}" is not a host name, an IP address or *`;
}

/** Parses `a,b,c` (the setting's text): the entries, lower-cased, or a problem naming the bad one. */
export function parseAllowedHosts(text: string): string[] | string {
  const entries = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (entries.length === 0) return 'must list at least one host name, IP address or *';
  for (const e of entries) {
    const problem = allowedHostProblem(e);
    if (problem !== null) return problem;
  }
  return entries.map(normalise);
}

/**
 * The allow-list of a control listener bound to `bindHost`: `configured` (the setting;
 * null when not given) or, without one, the loopback default when `authenticated` is
 * false and no check at all when it is true.
 */
export function hostAllowList(
  configured: readonly string[] | null,
  opts: { authenticated: boolean; bindHost: string },
): HostAllowList | null {
  if (configured === null && opts.authenticated) return null;
  const names = new Set(configured ?? []);
  if (names.has('*')) return null;
  const bind = normalise(opts.bindHost);
  if (isIP(bind) !== 0 && !isWildcard(bind)) names.add(bind);
  return {
    allows(hostHeader) {
      // HTTP/1.0 without Host (missingHost answers an HTTP/1.1 one): no name a page could have chosen.
      if (hostHeader === undefined) return true;
      const host = hostOf(hostHeader);
      return host !== null && (names.has(host) || isLoopback(host));
    },
  };
}

/** 421 with the name refused (sent back to the client that sent it, so nothing is disclosed). */
export function hostNotAllowed(hostHeader: string | undefined): ProblemError {
  return new ProblemError(
    'host-not-allowed',
    'this control listener answers only for the host names it is configured with (--allowed-hosts); a page reached through another name is refused (DNS rebinding)',
    { host: hostHeader ?? null },
  );
}

/** Refuses a request whose Host is not allowed; null when it is (or there is no list). */
export function checkHost(list: HostAllowList | null, req: IncomingMessage): ProblemError | null {
  if (list === null || list.allows(req.headers.host)) return null;
  return hostNotAllowed(req.headers.host);
}

/** The host part of a Host header (port and brackets off, lower-cased), or null when it is not one. */
export function hostOf(header: string): string | null {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    if (end < 0) return null;
    const rest = h.slice(end + 1);
    if (rest !== '' && !/^:[0-9]{1,5}$/.test(rest)) return null;
    return h.slice(1, end);
  }
  const m = /^([^:]*)(?::[0-9]{1,5})?$/.exec(h);
  if (m === null || m[1] === '') return null;
  return normalise(m[1] as string);
}

function normalise(entry: string): string {
  let h = entry.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  return h.endsWith('.') && h.length > 1 ? h.slice(0, -1) : h;
}

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  const v = isIP(host);
  if (v === 4) return host.startsWith('127.');
  if (v === 6) return host === '::1' || host === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(host);
  return false;
}

function isWildcard(ip: string): boolean {
  return ip === '0.0.0.0' || ip === '::' || ip === '0:0:0:0:0:0:0:0';
}
