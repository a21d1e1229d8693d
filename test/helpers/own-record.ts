/**
 * What src/own-record.ts promises of a record keyed by outside names: nothing on its
 * prototype chain has a property, and the chain never reaches Object.prototype.
 */
export function inheritsNothing(value: object): boolean {
  for (let proto = Object.getPrototypeOf(value) as object | null; proto !== null;) {
    if (proto === Object.prototype || Reflect.ownKeys(proto).length > 0) return false;
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return true;
}
