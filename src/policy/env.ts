/**
 * `${NAME}` and `${NAME:-default}` in an upstream's `url`, expanded when the policy is
 * compiled (every kind: one home for the rule). `${NAME}` needs NAME set; with
 * `:-default`, an unset or empty NAME gives the default (as in a POSIX shell), so an
 * example policy can run as it is and still be pointed elsewhere
 * (`ORDERS_URL=http://orders:8080`). The expanded url is never echoed in an error: it
 * may carry a password from the environment.
 */

/** `${NAME}` or `${NAME:-default}`; a default may not contain "}". */
const ENV_REF = /\$\{([^}:]*)(?::-([^}]*))?\}/g;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export type Env = Readonly<Record<string, string | undefined>>;

/** Expands every reference in `text`; an unset (defaultless) or malformed one is an error naming it. */
export function expandEnv(
  text: string,
  env: Env,
  field = 'url',
): { ok: true; value: string } | { ok: false; message: string } {
  const missing: string[] = [];
  let bad: string | null = null;
  const value = text.replace(ENV_REF, (_m, name: string, fallback: string | undefined) => {
    if (!ENV_NAME.test(name)) {
      bad ??= name;
      return '';
    }
    const v = env[name];
    if (fallback !== undefined && (v === undefined || v === '')) return fallback;
    if (v === undefined) {
      if (!missing.includes(name)) missing.push(name);
      return '';
    }
    return v;
  });
  if (bad !== null) return { ok: false, message: `invalid environment reference "\${${bad}}"` };
  if (missing.length > 0) {
    const names = missing.map((n) => `"${n}"`).join(', ');
    return {
      ok: false,
      message: `environment variable ${names} is not set (referenced as \${…} in ${field}; \${NAME:-default} gives a default)`,
    };
  }
  if (text.replace(ENV_REF, '').includes('${'))
    return { ok: false, message: `unterminated "\${" in ${field}` };
  return { ok: true, value };
}
