/** Raw HTTP/1.1 over TCP, for tests of what a client can send that fetch and undici would not. */
import { connect } from 'node:net';

/** Sends raw bytes and returns everything the server sent until it closed (or 2 s passed). */
export function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.setTimeout(2000, () => socket.end());
    socket.on('data', (d) => (out += d.toString('latin1')));
    socket.on('close', () => resolve(out));
    socket.on('error', reject);
    socket.write(text);
  });
}

/** The status of the first response in `response` (0 when there is none). */
export function statusOf(response: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
}
