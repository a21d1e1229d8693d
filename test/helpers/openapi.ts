/**
 * Every answer the control API gives in a test, checked against docs/openapi.json (the
 * document GET /v1/openapi.json serves): `checkAnswers(app)` hooks the app before its
 * first request; each answer's path, method, status and media type must be described,
 * and its JSON body must match the schema. `answerViolations()` lists what did not, so
 * a test file ends with `expect(answerViolations()).toEqual([])` and the document cannot
 * drift from what the server answers.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

interface Operation {
  responses: Record<string, { content?: Record<string, { schema: object }> }>;
}
type Document = { paths: Record<string, Record<string, Operation>>; components: object };

export const OPENAPI = JSON.parse(
  readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8'),
) as Document;

const ajv = new Ajv2020({ strict: false, allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
ajv.addSchema({ ...OPENAPI, $id: 'openapi' });
const validators = new Map<string, ValidateFunction>();

function validatorFor(path: string, method: string, status: string, type: string): ValidateFunction {
  const key = `${path} ${method} ${status} ${type}`;
  let v = validators.get(key);
  if (v === undefined) {
    const pointer = ['paths', path, method, 'responses', status, 'content', type, 'schema']
      .map((p) => p.replace(/~/g, '~0').replace(/\//g, '~1'))
      .join('/');
    v = ajv.getSchema(`openapi#/${pointer}`) as ValidateFunction;
    validators.set(key, v);
  }
  return v;
}

/** The documented path template a fastify route pattern is (`:key` → `{key}`). */
function template(route: string): string {
  return route.replace(/:([A-Za-z_]\w*)/g, '{$1}');
}

/** What one answer breaks in the document, or null when it is described. */
export function violation(
  method: string,
  route: string | undefined,
  status: number,
  contentType: string,
  body: string,
): string | null {
  const where = `${method} ${route ?? '(no route)'} → ${status}`;
  if (route === undefined) {
    // No route: a problem (404, or 401 first under an auth file), the one Problem schema.
    return status >= 400 && status < 500 && contentType.startsWith('application/problem+json')
      ? null
      : `${where}: undescribed`;
  }
  // The dashboard's page and assets are not part of the API (docs/events.md).
  if (route === '/dashboard' || route.startsWith('/dashboard/')) return null;
  const path = template(route);
  const op = OPENAPI.paths[path]?.[method.toLowerCase() === 'head' ? 'get' : method.toLowerCase()];
  if (op === undefined) return `${where}: no operation in docs/openapi.json`;
  const statusKey = [String(status), `${String(status)[0]}XX`].find((k) => op.responses[k] !== undefined);
  if (statusKey === undefined) return `${where}: status not documented`;
  const response = op.responses[statusKey] as Operation['responses'][string];
  const ref = (response as { $ref?: string }).$ref;
  const content = ref === undefined ? response.content : { 'application/problem+json': { schema: {} } };
  const type = contentType.split(';')[0]?.trim() ?? '';
  if (content?.[type] === undefined) return `${where}: media type ${type} not documented`;
  if (method === 'HEAD' || !type.endsWith('json')) return null;
  const validate =
    ref === undefined
      ? validatorFor(path, method.toLowerCase(), statusKey, type)
      : (ajv.getSchema('openapi#/components/schemas/Problem') as ValidateFunction);
  if (validate(JSON.parse(body))) return null;
  return `${where}: ${ajv.errorsText(validate.errors)} in ${body.slice(0, 300)}`;
}

const found: string[] = [];

/** Checks every answer `app` gives from now on (call before its first request). */
export function checkAnswers<T extends FastifyInstance>(app: T): T {
  app.addHook('onSend', async (request, reply, payload) => {
    if (typeof payload === 'string' || Buffer.isBuffer(payload)) {
      const type = String(reply.getHeader('content-type') ?? '');
      const v = violation(
        request.method,
        request.routeOptions.url,
        reply.statusCode,
        type,
        payload.toString(),
      );
      if (v !== null) found.push(v);
    }
    return payload;
  });
  return app;
}

/** The answers that broke the document so far in this test file. */
export function answerViolations(): string[] {
  return [...found];
}
