/**
 * The ops dashboard (GET /dashboard on the control listener): static HTML, CSS and JS
 * shipped in the package (./assets, copied to dist/ by the build), no CDN and no
 * internet. The page reads GET /v1/status, /v1/locks and /v1/events and follows
 * /v1/events/stream; it renders every value as text (lock keys and paths come from
 * clients), and the strict Content-Security-Policy allows no inline script or style.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const ASSETS = {
  '/dashboard': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  '/dashboard/style.css': ['style.css', 'text/css; charset=utf-8'],
} as const;

/** The page's icon (so the browser's request for one is answered, not a 404). */
const FAVICON =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">' +
  '<rect width="16" height="16" rx="3" fill="#1d2330"/>' +
  '<path d="M4 3v10M8 3v10M12 3v10M2 6h12M2 10h12" stroke="#d8543b" stroke-width="1.5"/></svg>';

async function dashboardRoutes(app: FastifyInstance): Promise<void> {
  app.get('/dashboard/favicon.svg', async (_request, reply) =>
    reply.type('image/svg+xml').header('cache-control', 'max-age=86400').send(FAVICON),
  );
  for (const [path, [file, type]] of Object.entries(ASSETS)) {
    const body = readFileSync(new URL(`./assets/${file}`, import.meta.url));
    app.get(path, async (_request, reply) =>
      reply
        .type(type)
        .header('content-security-policy', DASHBOARD_CSP)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header('cache-control', 'no-cache')
        .send(body),
    );
  }
}

export default fp(dashboardRoutes, { name: 'fencegate-dashboard', fastify: '5.x' });
