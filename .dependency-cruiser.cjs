/**
 * The layers of src/, bottom to top. A module imports only from its own layer and the
 * layers below it (type-only imports included), and nothing imports in a circle:
 *
 *   1 foundation   src/{errors,tokens,lock-keys,own-record,paths,version}.ts, client/, sample/
 *   2 http         protocol helpers: problems, TLS files, bodies, the request-head parser and the refusal lane
 *   3 store        the lock/fence stores, the Store interface and its operation list
 *   4 breakers     circuit breakers and the boards that show them
 *   5 policy       policy files -> compiled route table; kinds are handed in, never imported
 *   6 sequencer    signed sequencers (keys, issuing, verifying)
 *   7 observe      metrics, events, logs (reads the gateway's reason lists, gateway/reasons.ts, a leaf)
 *   8 auth         principals, credentials, the control API's auth plugin
 *   9 issuer       the lock issuer service
 *  10 gateway      the data plane and the downstream kinds (gateway/kinds/)
 *  11 control      the control API: its routes, the dashboard, the control and probe listeners
 *  12 composition  serve.ts (the composition root), policies.ts, settings.ts, config.ts, init.ts, cli.ts, index.ts, workers/
 *
 * `npm run lint:layers` checks it (part of `npm test`).
 */
const LAYERS = [
  ['foundation', '^src/(errors|tokens|lock-keys|own-record|paths|version)\\.ts$|^src/(client|sample)/'],
  ['http', '^src/http/'],
  ['store', '^src/store/'],
  ['breakers', '^src/breakers/'],
  ['policy', '^src/policy/'],
  ['sequencer', '^src/sequencer/'],
  ['observe', '^src/observe/'],
  ['auth', '^src/auth/'],
  ['issuer', '^src/issuer/'],
  ['gateway', '^src/gateway/'],
  ['control', '^src/control/'],
  ['composition', '^src/(serve|policies|config|settings|init|cli|index)\\.ts$|^src/workers/'],
];

// The one arrow from a lower layer into a higher one: the gateway's reason vocabularies
// (why a fenced write was refused, why a forward was cut), a leaf module, which metrics
// and events label their series and events with.
const REASONS = '^src/gateway/reasons\\.ts$';

const upward = LAYERS.map(([name, path], i) => ({
  name: `layer-${name}`,
  comment: `${name} (layer ${i + 1}) imports only its own layer and the ones below it (.dependency-cruiser.cjs)`,
  severity: 'error',
  from: { path },
  to: {
    path: LAYERS.slice(i + 1)
      .map(([, p]) => p)
      .join('|'),
    ...(name === 'observe' ? { pathNot: REASONS } : {}),
  },
}));

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No import cycles, type-only imports included.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'layer-unassigned',
      comment: 'Every module under src/ belongs to a layer: add a new folder or root file to LAYERS.',
      severity: 'error',
      from: { path: '^src/', pathNot: LAYERS.map(([, p]) => p).join('|') },
      to: {},
    },
    {
      name: 'reasons-leaf',
      comment: 'gateway/reasons.ts is read from below the gateway, so it imports nothing of src/.',
      severity: 'error',
      from: { path: REASONS },
      to: { path: '^src/' },
    },
    ...upward.filter((rule) => rule.to.path !== ''),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    includeOnly: '^src/',
    // `import type` counts: a type-only cycle is still a cycle between modules.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
