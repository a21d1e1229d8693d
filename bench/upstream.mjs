// A minimal upstream for the benchmarks: reads the body, answers 200 with a small JSON.
// Run as a process by bench/run.mjs (prints "listening URL"); createBenchUpstream() is the
// same server for a bench that keeps its upstream in its own process (memory-locks.mjs).
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';

export function createBenchUpstream() {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
      res.end('{"ok":true}');
    });
  });
  server.keepAliveTimeout = 60_000;
  return server;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const server = createBenchUpstream();
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write(`listening http://127.0.0.1:${server.address().port}\n`);
  });
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}
