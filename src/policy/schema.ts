/**
 * The JSON Schema of one policy file, and the TypeScript shape it guarantees: the fields
 * every upstream and route has, and each kind's own fields from its schema fragment
 * (PolicyKind.upstreamFields, routeFields), merged for the kinds handed in.
 * Every object has `additionalProperties: false`: an unknown (often misspelled) key
 * is an error, never silently ignored.
 */
import type { FenceCheck } from '../store/types.js';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

export const NAME_PATTERN = '^[A-Za-z][A-Za-z0-9_-]{0,63}$';
export const NAME_HINT = 'must be 1-64 letters, digits, "-" or "_", starting with a letter';

export interface RawBreaker {
  errorThresholdPercentage?: number;
  volumeThreshold?: number;
  resetTimeoutMs?: number;
  rollingWindowMs?: number;
}

export interface RawUpstream {
  /** A downstream kind registered in src/gateway/kinds/index.ts (checked when compiling). */
  kind: string;
  url: string;
  timeoutMs?: number;
  breaker?: RawBreaker;
  /** https upstreams: how the upstream's certificate is verified, and the gateway's own (mTLS). */
  tls?: RawUpstreamTls;
  /**
   * kind: http: whether the upstream honours method-override headers (`X-HTTP-Method-Override`
   * and its two variants). `strip` (default): they never reach it. `honour`: a request that
   * carries one is routed and fenced by the method it names, and the header is forwarded.
   */
  methodOverride?: 'strip' | 'honour';
  /** A kind's own fields (its PolicyKind.upstreamFields), shaped as its schema fragment says. */
  readonly [kindField: string]: unknown;
}

/** File paths are relative to the policy file. */
export interface RawUpstreamTls {
  /** CA bundle (PEM) the upstream's certificate must chain to, instead of the built-in roots. */
  ca?: string;
  /** The name the certificate must carry (and SNI), when it is not the URL's host. */
  serverName?: string;
  /** Client certificate and key the gateway presents (mTLS to the upstream); both or neither. */
  cert?: string;
  key?: string;
}

export interface RawFencing {
  check?: FenceCheck;
  enforce?: boolean;
  drainTimeoutMs?: number;
}

export interface RawUpload {
  idleTimeoutMs?: number;
  timeoutMs?: number;
}

/** A route's Idempotency-Key replays (docs/gateway.md, "Idempotency"). */
export interface RawIdempotency {
  /** The request header that carries the key (default Idempotency-Key). */
  header?: string;
  /** How long a stored answer is replayed, ms (default 24 h). */
  ttlMs?: number;
}

export interface RawRoute {
  name: string;
  methods: HttpMethod[];
  path: string;
  upstream: string;
  lock?: string;
  fencing?: RawFencing;
  upload?: RawUpload;
  idempotency?: RawIdempotency;
  /** Path parameter → regular expression its whole value must match. */
  params?: Record<string, string>;
  /** Later fenced routes whose matching requests this route deliberately takes (see shadowing.ts). */
  shadows?: string[];
  /** A kind's own fields (its PolicyKind.routeFields), shaped as its schema fragment says. */
  readonly [kindField: string]: unknown;
}

export interface RawPolicyFile {
  version: 1;
  upstreams?: Record<string, RawUpstream>;
  routes?: RawRoute[];
}

const name = { type: 'string', pattern: NAME_PATTERN };
const ms = (min: number, max: number) => ({ type: 'integer', minimum: min, maximum: max });

const breaker = {
  type: 'object',
  additionalProperties: false,
  properties: {
    errorThresholdPercentage: ms(1, 100),
    volumeThreshold: ms(0, 10_000),
    resetTimeoutMs: ms(100, 3_600_000),
    rollingWindowMs: ms(1_000, 3_600_000),
  },
};

const upstreamHead = {
  type: 'object',
  additionalProperties: false,
  required: ['kind', 'url'],
  properties: {
    kind: { type: 'string', minLength: 1 },
    url: { type: 'string', minLength: 1 },
    timeoutMs: ms(1, 600_000),
    breaker,
  },
};

/** Upstream fields after the kinds' own, in error listings. */
const upstreamTail = {
  properties: {
    methodOverride: { enum: ['strip', 'honour'] },
    tls: {
      type: 'object',
      additionalProperties: false,
      minProperties: 1,
      properties: {
        ca: { type: 'string', minLength: 1 },
        serverName: { type: 'string', minLength: 1 },
        cert: { type: 'string', minLength: 1 },
        key: { type: 'string', minLength: 1 },
      },
    },
  },
};

const fencing = {
  type: 'object',
  additionalProperties: false,
  properties: {
    check: { enum: ['token', 'lease', 'sequencer'] },
    enforce: { type: 'boolean' },
    drainTimeoutMs: ms(0, 600_000),
  },
};

const upload = {
  type: 'object',
  additionalProperties: false,
  properties: {
    idleTimeoutMs: ms(100, 3_600_000),
    timeoutMs: ms(100, 86_400_000),
  },
};

const idempotency = {
  type: 'object',
  additionalProperties: false,
  properties: {
    header: { type: 'string', minLength: 1 },
    // 1 s … 7 days
    ttlMs: ms(1_000, 604_800_000),
  },
};

const route = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'methods', 'path', 'upstream'],
  properties: {
    name,
    methods: { type: 'array', minItems: 1, uniqueItems: true, items: { enum: [...HTTP_METHODS] } },
    path: { type: 'string', minLength: 1 },
    upstream: name,
    lock: { type: 'string', minLength: 1 },
    fencing,
    upload,
    idempotency,
    params: {
      type: 'object',
      propertyNames: { type: 'string', minLength: 1 },
      additionalProperties: { type: 'string', minLength: 1 },
    },
    shadows: { type: 'array', uniqueItems: true, items: name },
  },
};

/** JSON Schema of each field, by field name, in the order they are listed in errors. */
export type FieldSchemas = Readonly<Record<string, object>>;

/** A kind's own policy fields (./kinds.ts: PolicyKind). */
export interface KindFields {
  readonly upstreamFields: FieldSchemas;
  readonly routeFields: FieldSchemas;
}

/** The schema of one policy file for these kinds: each kind's own fields after the shared ones. */
export function policyFileSchema(kinds: Readonly<Record<string, KindFields>>) {
  const all = Object.values(kinds);
  const upstream = {
    ...upstreamHead,
    properties: {
      ...upstreamHead.properties,
      ...Object.assign({}, ...all.map((k) => k.upstreamFields)),
      ...upstreamTail.properties,
    },
  };
  const kindRoute = {
    ...route,
    properties: { ...route.properties, ...Object.assign({}, ...all.map((k) => k.routeFields)) },
  };
  return {
    type: 'object',
    additionalProperties: false,
    required: ['version'],
    properties: {
      version: { const: 1 },
      upstreams: { type: 'object', propertyNames: name, additionalProperties: upstream },
      routes: { type: 'array', items: kindRoute },
    },
  } as const;
}
