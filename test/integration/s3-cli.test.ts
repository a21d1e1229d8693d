/**
 * The AWS CLI (Debian's awscli, installed by .ci/run) through the gateway to s3rver: a
 * refusal on an s3 route is printed with its code, `An error occurred (StaleFencingToken)
 * when calling the PutObject operation: …`. The CLI sends `Fencing-Token` through a small
 * plugin (docs/s3.md shows it) that adds the header before signing.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mint, startGateway, type TestGateway } from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { CREDENTIALS, REGION, invoicePolicy, startS3rver, type S3rverHandle } from '../helpers/s3.js';

/** Debian's package puts it here (.ci/run installs it); a missing CLI fails the run. */
const AWS = '/usr/bin/aws';

const PLUGIN = `"""Adds Fencing-Token (from the FENCING_TOKEN environment variable) to S3 writes, before signing."""
import os


def add_fencing_token(request, **kwargs):
    token = os.environ.get("FENCING_TOKEN")
    if token:
        request.headers["Fencing-Token"] = token


def awscli_initialize(cli):
    cli.register("before-sign.s3", add_fencing_token)
`;

let s3: S3rverHandle;
let gw: TestGateway;
let dir: string;
const store = new MemoryStore();

beforeAll(async () => {
  s3 = await startS3rver(['invoices']);
  gw = await startGateway({
    store,
    policy: invoicePolicy(s3.url),
  });
  dir = mkdtempSync(join(tmpdir(), 'fg-awscli-'));
  writeFileSync(join(dir, 'fencing_token.py'), PLUGIN);
  writeFileSync(
    join(dir, 'config'),
    `[default]\nregion = ${REGION}\ns3 =\n  addressing_style = path\n` +
      `[plugins]\ncli_legacy_plugin_path = ${dir}\nfencing_token = fencing_token\n`,
  );
  writeFileSync(join(dir, 'body.txt'), 'from the CLI');
});

afterAll(async () => {
  await gw?.close();
  await s3?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function aws(args: string[], token?: bigint): Promise<Run> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: dir,
    AWS_CONFIG_FILE: join(dir, 'config'),
    AWS_SHARED_CREDENTIALS_FILE: join(dir, 'no-credentials'),
    AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_PAGER: '',
    AWS_MAX_ATTEMPTS: '1',
  };
  if (token !== undefined) env.FENCING_TOKEN = token.toString();
  return new Promise((resolve) => {
    execFile(AWS, [...args, '--endpoint-url', gw.url], { env, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

const putObject = (key: string, token?: bigint) =>
  aws(['s3api', 'put-object', '--bucket', 'invoices', '--key', key, '--body', join(dir, 'body.txt')], token);

describe('the AWS CLI through the gateway', () => {
  it('a write without a token: the CLI prints FencingTokenRequired', async () => {
    const run = await putObject('cli.txt');
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(
      /An error occurred \(FencingTokenRequired\) when calling the PutObject operation/,
    );
  });

  it("a stale owner's write: the CLI prints StaleFencingToken; the current owner's passes", async () => {
    const old = (await mint(store, 'invoice:cli-race.txt')).token;
    const fresh = (await mint(store, 'invoice:cli-race.txt')).token;
    const current = await putObject('cli-race.txt', fresh);
    expect(current.stderr).toBe('');
    expect(current.code).toBe(0);
    expect(JSON.parse(current.stdout)).toHaveProperty('ETag');
    const stale = await putObject('cli-race.txt', old);
    expect(stale.code).not.toBe(0);
    // (with AWS_MAX_ATTEMPTS=1 the CLI adds "(reached max retries: 0)" before the colon)
    expect(stale.stderr).toMatch(
      /An error occurred \(StaleFencingToken\) when calling the PutObject operation(?: \(reached max retries: 0\))?: token \d+ is older/,
    );
  });
});
