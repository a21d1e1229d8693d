/** Runs a client script from test/fault/clients/ as a child process and reads its JSON lines. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { ROOT } from '../../helpers/procs.js';

export interface ChildEvent {
  event: string;
  [k: string]: unknown;
}

export class ChildClient {
  readonly events: ChildEvent[] = [];
  private stderr = '';
  private waiters: (() => void)[] = [];

  constructor(readonly proc: ChildProcess) {
    let buf = '';
    proc.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() === '') continue;
        try {
          this.events.push(JSON.parse(line) as ChildEvent);
        } catch {
          this.events.push({ event: 'unparsed', line });
        }
        for (const w of this.waiters.splice(0)) w();
      }
    });
    proc.stderr?.on('data', (d: Buffer) => (this.stderr += d.toString()));
    proc.on('exit', () => {
      for (const w of this.waiters.splice(0)) w();
    });
  }

  /** Waits for the first event named `name` (bounded), failing fast if the child dies or reports fatal. */
  async next(name: string, timeoutMs = 30_000): Promise<ChildEvent> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find((e) => e.event === name);
      if (found) return found;
      const fatal = this.events.find((e) => e.event === 'fatal');
      if (fatal) throw new Error(`child failed: ${String(fatal.error)}\n${this.stderr}`);
      if (this.proc.exitCode !== null || this.proc.signalCode !== null)
        throw new Error(
          `child exited (${this.proc.exitCode ?? this.proc.signalCode}) before "${name}": ${this.stderr}`,
        );
      const left = end - Date.now();
      if (left <= 0)
        throw new Error(`child: no "${name}" within ${timeoutMs} ms; events ${JSON.stringify(this.events)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 500));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  signal(sig: NodeJS.Signals): void {
    this.proc.kill(sig);
  }

  sendLine(line: string): void {
    this.proc.stdin?.write(`${line}\n`);
  }

  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGCONT'); // a stopped process gets SIGKILL too, but be tidy
    this.proc.kill('SIGKILL');
    await once(this.proc, 'exit');
  }

  async exited(timeoutMs = 30_000): Promise<number | null> {
    if (this.proc.exitCode !== null) return this.proc.exitCode;
    const t = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    const [code] = (await once(this.proc, 'exit')) as [number | null];
    clearTimeout(t);
    return code;
  }
}

/** Starts test/fault/clients/<script> with one JSON argument. */
export function startChildClient(script: string, config: unknown): ChildClient {
  const proc = spawn(
    process.execPath,
    [join(ROOT, 'test', 'fault', 'clients', script), JSON.stringify(config)],
    {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  return new ChildClient(proc);
}
