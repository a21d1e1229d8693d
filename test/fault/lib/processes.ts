/**
 * Finding and stopping the processes of a running gateway from outside, for the
 * scenarios that stop "a gateway" in the ways an operator meets it: all of it (a VM
 * pause), one data worker of `serve --workers N`, or its event loop blocked by a long
 * synchronous task while the process runs.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { WebSocket } from 'undici';
import { sleep } from '../../helpers/wait.js';

/** The pids whose parent is `pid` (a `serve --workers N` primary's workers). */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // Fields after the command (in parentheses, may hold spaces): state, ppid, …
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[1]) === pid) out.push(Number(entry));
  }
  return out;
}

/**
 * The pid among `pids` that owns the TCP connection whose local port (on 127.0.0.1) is
 * `port`: the process that sent a request the upstream received from that port. Null
 * when none of them does (the connection closed meanwhile).
 */
export function ownerOfPort(pids: readonly number[], port: number): number | null {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      const local = cols[1];
      if (local === undefined || cols[9] === undefined) continue;
      if (parseInt(local.slice(local.lastIndexOf(':') + 1), 16) === port) inodes.add(cols[9]);
    }
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m !== null && inodes.has(m[1]!)) return pid;
    }
  }
  return null;
}

/**
 * Blocks the event loop of the Node process `pid` for `ms`, as a long synchronous task
 * would (a huge JSON.parse, a catastrophic regular expression): SIGUSR1 opens its
 * inspector on `inspectPort` (start it with NODE_OPTIONS=--inspect-port=127.0.0.1:PORT),
 * and a Runtime.evaluate busy-waits on its main thread. The product has no hook for
 * this: it is what a debugger attached by an operator could do. Resolves once the
 * evaluation was sent (the inspector runs it on the main thread at its next chance, the
 * loop idle or busy); `done` once it ended.
 */
export async function blockEventLoop(
  pid: number,
  inspectPort: number,
  ms: number,
): Promise<{ done: Promise<void> }> {
  process.kill(pid, 'SIGUSR1');
  let url: string | undefined;
  const end = Date.now() + 10_000;
  while (url === undefined) {
    try {
      const res = await fetch(`http://127.0.0.1:${inspectPort}/json/list`);
      const targets = (await res.json()) as { webSocketDebuggerUrl?: string }[];
      url = targets[0]?.webSocketDebuggerUrl;
    } catch {
      /* not listening yet */
    }
    if (url === undefined) {
      if (Date.now() > end) throw new Error(`the inspector of ${pid} did not open on ${inspectPort}`);
      await sleep(50);
    }
  }
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener('open', () => resolve(), { once: true });
    ws.addEventListener('error', () => reject(new Error('inspector connection failed')), { once: true });
  });
  const expression = `(() => { const end = Date.now() + ${ms}; while (Date.now() < end); return 'unblocked'; })()`;
  const done = new Promise<void>((resolve) => {
    ws.addEventListener('message', () => {
      ws.close();
      resolve();
    });
    ws.addEventListener('close', () => resolve());
  });
  ws.send(JSON.stringify({ id: 1, method: 'Runtime.evaluate', params: { expression } }));
  return { done };
}
