/**
 * Refusals on s3 routes, in S3's own error format, so S3 clients can read them: the AWS
 * SDKs raise an error named by `<Code>`, the AWS CLI prints it. The same refusal as the
 * problem+json one (status, headers, fields), written as
 *
 *   <?xml version="1.0" encoding="UTF-8"?>
 *   <Error><Code>StaleFencingToken</Code><Message>…</Message>
 *   <Type>urn:fencegate:stale-token</Type><Lock>…</Lock><Token>41</Token><Highest>42</Highest>
 *   <RequestId>…</RequestId></Error>
 *
 * (one line): `Code` from the table below, `Message` the problem's detail, `Type` the
 * problem type, then each extra field as an element named by the field in PascalCase,
 * then the request id (also in `x-amz-request-id`, where the SDKs read it from).
 */
import { PROBLEMS, type ProblemCode, type ProblemError } from '../../../errors.js';
import type { FormattedProblem, ProblemFormat } from '../../../http/problems.js';

/**
 * `<Code>` of each refusal an s3 route can give; stable (clients branch on it). A code not
 * listed here (none is expected on an s3 route) gets its name in PascalCase.
 */
export const S3_ERROR_CODES: Readonly<Partial<Record<ProblemCode, string>>> = Object.freeze({
  'stale-token': 'StaleFencingToken',
  'token-required': 'FencingTokenRequired',
  'token-malformed': 'MalformedFencingToken',
  'token-invalid': 'InvalidFencingToken',
  'lease-expired': 'FencingLeaseExpired',
  'fence-unavailable': 'FenceUnavailable',
  'invalid-key': 'InvalidLockKey',
  'bucket-write': 'BucketWriteNotFenced',
  'delete-objects-invalid': 'MalformedDeleteObjects',
  'request-unfenceable': 'RequestUnfenceable',
  'virtual-host-refused': 'VirtualHostRefused',
  'no-route': 'NoRoute',
  'bad-request': 'BadRequest',
  'payload-too-large': 'PayloadTooLarge',
  'request-timeout': 'RequestTimeout',
  'upstream-unavailable': 'UpstreamUnavailable',
  'upstream-timeout': 'UpstreamTimeout',
  'forward-interrupted': 'ForwardInterrupted',
  'store-unavailable': 'StoreUnavailable',
  internal: 'InternalError',
});

/** The `<Code>` a refusal with fencegate code `code` has on an s3 route. */
export function s3ErrorCode(code: ProblemCode): string {
  return S3_ERROR_CODES[code] ?? code.replace(/(?:^|-)([a-z])/g, (_m, c: string) => c.toUpperCase());
}

/** Every fencegate code with its S3 `<Code>`, in catalogue order. */
export function s3ErrorCodes(): [ProblemCode, string][] {
  return (Object.keys(PROBLEMS) as ProblemCode[]).map((code) => [code, s3ErrorCode(code)]);
}

/** Members of the problem body that are written as the elements before the extras, or not at all. */
const OWN = new Set(['type', 'title', 'status', 'detail', 'requestId']);
const FIELD_NAME = /^[a-z][A-Za-z0-9]*$/;
const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
  // A raw CR would be read back as LF.
  '\r': '&#13;',
};
/** The five specials, CR, and every character XML 1.0 cannot carry (controls, lone surrogates, U+FFFE/F). */
const NEEDS_ESCAPE = /[&<>"'\r]|[^\t\n\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

/** `text` as XML character data; characters XML cannot carry become U+FFFD. */
export function escapeXml(text: string): string {
  return text.replace(NEEDS_ESCAPE, (c) => ESCAPES[c] ?? '\uFFFD');
}

function element(name: string, value: unknown): string {
  const text =
    typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value);
  return `<${name}>${escapeXml(text)}</${name}>`;
}

/** Everything before `<RequestId>`, made once per problem (a stale flood answers one problem many times). */
const heads = new WeakMap<ProblemError, string>();

function head(problem: ProblemError): string {
  let text = heads.get(problem);
  if (text !== undefined) return text;
  const body = problem.toBody();
  text =
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error>' +
    element('Code', s3ErrorCode(problem.code)) +
    element('Message', problem.message) +
    element('Type', body.type);
  for (const field in body) {
    if (OWN.has(field) || !FIELD_NAME.test(field)) continue;
    text += element(field[0]!.toUpperCase() + field.slice(1), body[field]);
  }
  heads.set(problem, text);
  return text;
}

/** The S3 `<Error>` document for `problem` on the request with id `requestId`. */
export function s3ErrorXml(problem: ProblemError, requestId: string): string {
  return `${head(problem)}${element('RequestId', requestId)}</Error>`;
}

export const s3ProblemFormat: ProblemFormat = {
  contentType: 'application/xml',
  render(problem: ProblemError, requestId: string): FormattedProblem {
    return { body: s3ErrorXml(problem, requestId), headers: { 'x-amz-request-id': requestId } };
  },
};
