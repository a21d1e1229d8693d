/**
 * Records keyed by names that come from outside (a policy's path parameters, the
 * headers of a request or an answer): every name is an own property, and nothing is
 * inherited, so `__proto__` or `constructor` is a name like any other and no lookup
 * or assignment reaches Object.prototype (where `__proto__`'s accessor lives).
 *
 * Their prototype is one empty, frozen object without a prototype of its own. An
 * object made with Object.create(null) would do the same, but V8 keeps those as
 * dictionaries: each property stored into one made per request missed the store's
 * inline cache and called into the runtime (profiled on the data plane: a few µs
 * per request over routing and the header copies).
 */
const NOTHING: object = Object.freeze(Object.create(null) as object);

/** A new empty record: own properties only, nothing inherited. */
export function ownRecord<V>(): Record<string, V> {
  return Object.create(NOTHING) as Record<string, V>;
}
