/**
 * A minimal Server-Sent Events client for tests: reads a text/event-stream response and
 * parses its frames (id, event, data), so a test can wait for the ones it expects.
 */
import http from 'node:http';

export interface SseFrame {
  id: string | null;
  event: string;
  data: string;
}

export interface SseClient {
  status: number;
  headers: http.IncomingHttpHeaders;
  frames: SseFrame[];
  /** Data frames (event "message"), parsed as JSON. */
  events<T = Record<string, unknown>>(): T[];
  /** Resolves once `cond` holds for the frames received, or rejects after `ms`. */
  waitFor(cond: (frames: SseFrame[]) => boolean, what: string, ms?: number): Promise<void>;
  close(): void;
}

export function openSse(url: string, headers: Record<string, string> = {}): Promise<SseClient> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      res.setEncoding('utf8');
      const frames: SseFrame[] = [];
      const waiters = new Set<() => void>();
      let buffer = '';
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const frame: SseFrame = { id: null, event: 'message', data: '' };
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) frame.id = line.slice(4);
            else if (line.startsWith('event: ')) frame.event = line.slice(7);
            else if (line.startsWith('data: ')) data.push(line.slice(6));
          }
          if (data.length === 0) continue;
          frame.data = data.join('\n');
          frames.push(frame);
        }
        for (const w of waiters) w();
      });
      res.on('error', () => undefined);
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        frames,
        events: <T>() => frames.filter((f) => f.event === 'message').map((f) => JSON.parse(f.data) as T),
        waitFor(cond, what, ms = 5000) {
          return new Promise<void>((ok, fail) => {
            const check = () => {
              if (!cond(frames)) return;
              clearTimeout(timer);
              waiters.delete(check);
              ok();
            };
            const timer = setTimeout(() => {
              waiters.delete(check);
              fail(new Error(`timed out waiting for ${what}; got ${JSON.stringify(frames)}`));
            }, ms);
            waiters.add(check);
            check();
          });
        },
        close: () => req.destroy(),
      });
    });
    req.on('error', reject);
  });
}
