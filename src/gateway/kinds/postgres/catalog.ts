/**
 * The columns of each table an upstream serves, read from the catalog once and kept
 * until they may have changed. Nothing polls: a change is noticed where it could matter.
 *
 * - Every statement's result carries the table's columns themselves, so Postgres reports
 *   their types: a prepared statement whose columns changed is refused by Postgres
 *   (SQLSTATE 0A000) before it runs, and a result of other types than the catalog said
 *   is noticed before a write commits (runner.ts). Either way the statement wrote
 *   nothing; the catalog is read again and the request runs on the new types.
 * - A value refused for its type, or an error from the database, is answered only once a
 *   read of the catalog that began after the request did confirms the types it was
 *   judged by (`confirm`). So a stale type never rounds a value (the statement refuses
 *   to run) nor refuses one (it is judged again).
 *
 * Each read that finds other columns starts a new generation: statements are named per
 * generation (prepared.ts), so none prepared for old types is run again.
 */
import { columnOf, type Column, type ColumnRow } from './column.js';

export interface TableColumns {
  /** Changes whenever the columns do. */
  readonly generation: number;
  readonly byName: ReadonlyMap<string, Column>;
  /** What the columns are, compared between reads. */
  readonly signature: string;
}

/** A read of the catalog, and the tick at which it began. */
interface Read {
  readonly began: number;
  readonly done: Promise<TableColumns>;
}

export class TableCatalog {
  private readonly cached = new Map<string, TableColumns>();
  private readonly reading = new Map<string, Read>();
  /** When the read whose columns are cached began: an older read finishing later is not kept. */
  private readonly cachedFrom = new Map<string, number>();
  private ticks = 0;
  private generations = 0;

  constructor(private readonly load: (qualified: string) => Promise<ColumnRow[]>) {}

  /** A point in time: a read that began after it sees every change committed before it. */
  now(): number {
    return this.ticks;
  }

  /** The columns of `qualified`, as last read (at once when they are known). */
  columns(qualified: string): TableColumns | Promise<TableColumns> {
    return this.cached.get(qualified) ?? this.read(qualified, -1).done;
  }

  /**
   * Whether the columns differ from `have`, by a read that began after `since` (joining
   * one in flight when it did). The new columns are kept for the next requests.
   */
  async changed(qualified: string, have: TableColumns, since: number): Promise<boolean> {
    const now = await this.read(qualified, since).done;
    return now.generation !== have.generation;
  }

  /** Forgets a table (it is read again on next use). */
  forget(qualified: string): void {
    this.cached.delete(qualified);
    this.cachedFrom.delete(qualified);
  }

  private read(qualified: string, since: number): Read {
    const inFlight = this.reading.get(qualified);
    if (inFlight !== undefined && inFlight.began > since) return inFlight;
    const began = ++this.ticks;
    const done = this.load(qualified).then(
      (rows) => {
        const next = rows.map(columnOf);
        const signature = JSON.stringify(next);
        const prev = this.cached.get(qualified);
        const cols =
          prev !== undefined && prev.signature === signature
            ? prev
            : { generation: ++this.generations, byName: new Map(next.map((c) => [c.name, c])), signature };
        this.settle(qualified, read, cols);
        return cols;
      },
      (err: unknown) => {
        this.settle(qualified, read, null);
        throw err;
      },
    );
    const read: Read = { began, done };
    this.reading.set(qualified, read);
    return read;
  }

  private settle(qualified: string, read: Read, cols: TableColumns | null): void {
    if (this.reading.get(qualified) === read) this.reading.delete(qualified);
    if ((this.cachedFrom.get(qualified) ?? 0) > read.began) return;
    if (cols === null) return this.forget(qualified);
    this.cached.set(qualified, cols);
    this.cachedFrom.set(qualified, read.began);
  }
}
