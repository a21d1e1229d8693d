/**
 * A script call whose arguments the caller encodes in RESP as it gathers them: the fence
 * batch's path (fence-batch.ts), taken by every fenced write.
 *
 * ioredis's own script commands cost the gateway ~12 µs of CPU per fenced write, nearly
 * all of it per argument of the batch's one call: Script.execute spreads and unshifts
 * them, the Command constructor flattens them (`args.flat()`), toWritable measures and
 * concatenates each (profile in docs/adr/0014-redis-fence-batches.md). Here each argument is
 * encoded once, when its operation joins the batch, and the command gives ioredis the
 * finished text. Everything else is ioredis's: the connection, its offline queue, the
 * command timeout, the reply parser.
 *
 * As with ioredis's scripts, the first call on each connection sends EVAL with the source
 * (which also loads it), later calls EVALSHA. A NOSCRIPT answer (someone ran SCRIPT FLUSH)
 * marks the connection as not loaded, so the next call sends the source again; nothing
 * ran, and the caller decides whether to resend (FenceBatcher does, once).
 */
import { createHash } from 'node:crypto';
import { type Cluster, Command, type Redis } from 'ioredis';

/** Arguments encoded as RESP bulk strings, and how many. */
export class RespArgs {
  count = 0;
  text = '';

  push(arg: string): void {
    this.text += '$' + Buffer.byteLength(arg) + '\r\n' + arg + '\r\n';
    this.count++;
  }

  append(more: RespArgs): void {
    this.text += more.text;
    this.count += more.count;
  }
}

export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

export class EncodedScript {
  readonly sha: string;
  /** The sockets this script was sent to in full (their Redis has it). */
  private readonly loaded = new WeakSet<object>();
  private readonly evalHead: string;
  private readonly shaHead: string;

  constructor(source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
    this.evalHead = '$4\r\neval\r\n$' + Buffer.byteLength(source) + '\r\n' + source + '\r\n';
    this.shaHead = '$7\r\nevalsha\r\n$40\r\n' + this.sha + '\r\n';
  }

  /**
   * Runs the script; `args` are numkeys, the KEYS and the ARGV, as EVALSHA takes them.
   * `slot`: the hash slot of its keys, by which a Redis Cluster client routes it (the
   * command carries no parsed arguments to find it from).
   */
  call(redis: Redis | Cluster, args: RespArgs, slot?: number): Promise<unknown> {
    const command = new EncodedCall(this, '*' + (args.count + 2) + '\r\n', args.text, slot);
    void redis.sendCommand(command);
    return (command.promise as Promise<unknown>).catch((err: unknown) => {
      if (isNoScript(err) && command.socket !== null) this.loaded.delete(command.socket);
      throw err;
    });
  }

  /** The command's text for `socket`: the source on its first call there, else the hash. */
  text(command: EncodedCall, socket: object): string {
    if (this.loaded.has(socket)) return command.head + this.shaHead + command.body;
    this.loaded.add(socket);
    command.name = 'eval';
    return command.head + this.evalHead + command.body;
  }
}

class EncodedCall extends Command {
  /** The socket it was written to (null until then). */
  socket: object | null = null;

  constructor(
    private readonly script: EncodedScript,
    readonly head: string,
    readonly body: string,
    private readonly keySlot: number | undefined,
  ) {
    super('evalsha', [], { replyEncoding: 'utf8' });
  }

  override getSlot(): number {
    return this.keySlot ?? (null as unknown as number);
  }

  override toWritable(socket: object): string {
    this.socket = socket;
    return this.script.text(this, socket);
  }
}
