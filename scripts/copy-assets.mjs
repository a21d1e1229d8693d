// Copies non-TypeScript runtime assets (Lua scripts, SQL, dashboard HTML) next to the compiled JS,
// so dist/ is self-contained and the same relative paths work from src/ (tests) and dist/ (CLI).
import { cpSync, readdirSync, statSync, mkdirSync } from 'node:fs';
import { join, extname, dirname } from 'node:path';

const exts = new Set(['.lua', '.sql', '.html', '.css', '.json']);
// Browser scripts are shipped as written (tsc compiles only the server's TypeScript).
const browserScripts = 'src/control/dashboard/assets/';
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (exts.has(extname(p)) || (p.startsWith(browserScripts) && extname(p) === '.js')) {
      const out = join('dist', p.slice('src/'.length));
      mkdirSync(dirname(out), { recursive: true });
      cpSync(p, out);
    }
  }
}
walk('src');
