/** Small helpers the bench scripts share. */
import { once } from 'node:events';
import { createServer } from 'node:net';

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort() {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address();
  s.close();
  return port;
}

/** POSTs JSON to a control API path; the parsed answer, or an error naming the status. */
export async function control(url, path, body) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/**
 * `fencegate serve` arguments for a benchmark gateway: ports chosen by the system, and one
 * process (the default is one per CPU), so that the /proc counters and the resident memory
 * read from its pid are the whole gateway's. Followed by `extra` (a later flag wins).
 */
export function serveArgs(store, policies, extra = []) {
  return [
    'serve',
    '--store',
    store,
    '--policies',
    policies,
    '--listen',
    '127.0.0.1:0',
    '--control',
    '127.0.0.1:0',
    '--log-level',
    'error',
    '--workers',
    '1',
    ...extra,
  ];
}

/** The line a started gateway prints: its data and control URLs. */
export const LISTENING = /listening data=([^\s"]+) control=([^\s"]+)/;
