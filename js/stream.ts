// Ordering of the kernel's data stream, pure and DOM-free (unit-tested in stream.test.ts).
//
// StreamBuffer decides *which* messages take effect and in which order:
//   - upserts take effect as they arrive, also before this view's replay (a kernel busy with a
//     long cell answers the view's replay-request only when it is idle again, and the view must
//     stay live meanwhile). Upserts are keyed, so applying one the replay also contains is
//     harmless;
//   - until the replay arrives, the rows of every upsert are also kept: per dataset, the newest
//     row of each key with the seq of the message that brought it (KeptRows). This is bounded by
//     the number of distinct keys, not by the number of messages (a cell streaming 10,000 batches
//     before the kernel can answer the replay-request). On the replay for this view, every
//     dataset is reset to the replay's content, and the kept rows with seq > replay.seq are
//     applied again as one upsert; then they are dropped. That is exactly what re-applying the
//     kept messages with seq > replay.seq in seq order would do: a key's last row among those
//     messages is its newest kept row, and a key whose newest kept row has seq <= replay.seq is
//     in none of them (its row comes from the replay). (A view rendered after earlier upserts
//     shows partial data until then, and is complete from the replay on.)
//   - replays for other views are ignored; duplicate / stale upserts (seq <= highest applied)
//     take no effect (before the replay a stale one is still kept, for the replay); a replay
//     older than what is shown after the first replay is ignored;
//   - while paused everything is queued, and processed through the same rules on resume.
// mergeUpdates folds several accepted updates into one (a backlog is applied as one changeset).
// RowStore keeps the current rows per dataset, upserting by key (a tombstone row, `_deleted: true`,
// removes its key), and turns each accepted update into a ChartUpdate (deduplicated rows plus the
// keys they replace) for the Vega views.

import type { DataBatch, KernelMessage, KeyedRow, ReplayMessage, UpsertMessage } from "./model";

/** A message that takes effect now: a replay resets every dataset, an upsert merges by key. */
export type AcceptedUpdate =
  | { kind: "reset"; seq: number; data: DataBatch }
  | { kind: "upsert"; seq: number; data: DataBatch };

/**
 * Rows of the upserts seen before the replay, bounded by the number of distinct keys: per
 * dataset, the newest row of each key and the seq of the message that brought it.
 */
export class KeptRows {
  /** Per dataset: the highest seq of a kept message naming it, and its rows by key. */
  private readonly sets = new Map<string, { seq: number; rows: Map<string, { row: KeyedRow; seq: number }> }>();
  /** Highest seq of a kept message (its data may be empty). */
  private maxSeq = Number.NEGATIVE_INFINITY;

  /** Rows kept, over all datasets (at most one per dataset and key). */
  get size(): number {
    let n = 0;
    for (const set of this.sets.values()) n += set.rows.size;
    return n;
  }

  /**
   * Keeps the rows of an upsert. A row replaces the kept row of its key if its seq is higher;
   * within one message the last row of a key wins (as in RowStore); a message whose seq is
   * already kept (a repeated delivery of the same message) changes nothing.
   */
  add(msg: UpsertMessage): void {
    this.maxSeq = Math.max(this.maxSeq, msg.seq);
    for (const [name, rows] of Object.entries(msg.data)) {
      if (rows === undefined) continue;
      let set = this.sets.get(name);
      if (set === undefined) {
        set = { seq: msg.seq, rows: new Map() };
        this.sets.set(name, set);
      }
      set.seq = Math.max(set.seq, msg.seq);
      const own = new Set<string>(); // keys this message has set: its later rows win
      for (const row of rows) {
        const kept = set.rows.get(row.key);
        if (kept === undefined || kept.seq < msg.seq || (kept.seq === msg.seq && own.has(row.key))) {
          set.rows.set(row.key, { row, seq: msg.seq });
          own.add(row.key);
        }
      }
    }
  }

  /**
   * The kept messages with seq > `seq` folded into one upsert (null if there are none): its seq
   * is their highest, and it names every dataset one of them names, with the kept rows newer than
   * `seq`.
   */
  after(seq: number): AcceptedUpdate | null {
    if (!(this.maxSeq > seq)) return null;
    const data: DataBatch = {};
    for (const [name, set] of this.sets) {
      if (!(set.seq > seq)) continue;
      const rows: KeyedRow[] = [];
      for (const kept of set.rows.values()) if (kept.seq > seq) rows.push(kept.row);
      data[name] = rows;
    }
    return { kind: "upsert", seq: this.maxSeq, data };
  }

  clear(): void {
    this.sets.clear();
    this.maxSeq = Number.NEGATIVE_INFINITY;
  }
}

export class StreamBuffer {
  readonly viewId: string;
  private _paused: boolean;
  private _appliedSeq: number | null = null;
  private _replaySeq: number | null = null;
  /** Rows of the upserts seen before this view's replay (newest per key). */
  private readonly keptForReplay = new KeptRows();
  /** Messages received while paused, in arrival order. */
  private readonly pausedQueue: KernelMessage[] = [];

  constructor(viewId: string, options: { paused?: boolean } = {}) {
    this.viewId = viewId;
    this._paused = options.paused ?? false;
  }

  get paused(): boolean {
    return this._paused;
  }

  /** True until the replay for this view has been applied. */
  get awaitingReplay(): boolean {
    return this._replaySeq === null;
  }

  /** Highest seq that took effect (null before the first upsert or replay). */
  get appliedSeq(): number | null {
    return this._appliedSeq;
  }

  /** Seq of the replay for this view that took effect (null before it). */
  get replaySeq(): number | null {
    return this._replaySeq;
  }

  /** Messages held back: those queued while paused. */
  get pending(): number {
    return this.pausedQueue.length;
  }

  /** Rows kept (already applied) to be applied again after the replay: at most one per dataset and key. */
  get kept(): number {
    return this.keptForReplay.size;
  }

  /** Feeds one kernel message; returns the updates to apply now, in order. */
  receive(msg: KernelMessage): AcceptedUpdate[] {
    if (msg.kind === "replay" && msg.view !== this.viewId) return [];
    if (this._paused) {
      this.pausedQueue.push(msg);
      return [];
    }
    return this.process(msg);
  }

  /** Pauses or resumes; on resume returns everything queued meanwhile, in order. */
  setPaused(paused: boolean): AcceptedUpdate[] {
    if (paused === this._paused) return [];
    this._paused = paused;
    if (paused) return [];
    const queued = this.pausedQueue.splice(0);
    return queued.flatMap((msg) => this.process(msg));
  }

  private process(msg: KernelMessage): AcceptedUpdate[] {
    return msg.kind === "replay" ? this.processReplay(msg) : this.processUpsert(msg);
  }

  private processUpsert(msg: UpsertMessage): AcceptedUpdate[] {
    if (this._replaySeq === null) this.keptForReplay.add(msg);
    return this.take(msg);
  }

  /** Applies an upsert unless it is a duplicate or older than what is shown. */
  private take(msg: UpsertMessage | AcceptedUpdate): AcceptedUpdate[] {
    if (this._appliedSeq !== null && msg.seq <= this._appliedSeq) return [];
    this._appliedSeq = msg.seq;
    return [{ kind: "upsert", seq: msg.seq, data: msg.data }];
  }

  private processReplay(msg: ReplayMessage): AcceptedUpdate[] {
    // After the first replay, an older one would move the view back in time. Before it, the
    // replay may be older than upserts already shown: their rows are kept and applied again below.
    if (this._replaySeq !== null && this._appliedSeq !== null && msg.seq < this._appliedSeq) return [];
    this._replaySeq = msg.seq;
    this._appliedSeq = msg.seq;
    const out: AcceptedUpdate[] = [{ kind: "reset", seq: msg.seq, data: msg.data }];
    const newer = this.keptForReplay.after(msg.seq);
    this.keptForReplay.clear();
    if (newer !== null) out.push(...this.take(newer));
    return out;
  }
}

/**
 * Folds accepted updates (in the order they were accepted) into one with the same effect on a
 * RowStore: rows merged per dataset by key, later rows winning; from the last reset on if there
 * is one (what came before it is wiped anyway), and then the result is a reset. Its seq is the
 * highest seq of `updates`. Returns null for no updates.
 */
export function mergeUpdates(updates: readonly AcceptedUpdate[]): AcceptedUpdate | null {
  if (updates.length === 0) return null;
  if (updates.length === 1) return updates[0] ?? null;
  let start = 0;
  for (let i = updates.length - 1; i >= 0; i--) {
    if (updates[i]?.kind === "reset") {
      start = i;
      break;
    }
  }
  const merged = new Map<string, Map<string, KeyedRow>>();
  let seq = Number.NEGATIVE_INFINITY;
  for (const update of updates) seq = Math.max(seq, update.seq);
  for (const update of updates.slice(start)) {
    for (const [name, rows] of Object.entries(update.data)) {
      if (rows === undefined) continue;
      let byKey = merged.get(name);
      if (byKey === undefined) {
        byKey = new Map();
        merged.set(name, byKey);
      }
      for (const row of rows) byKey.set(row.key, row);
    }
  }
  const data: DataBatch = {};
  for (const [name, byKey] of merged) data[name] = [...byKey.values()];
  const kind = updates[start]?.kind === "reset" ? "reset" : "upsert";
  return { kind, seq, data };
}

/** What upserting `rows` into a dataset does: keys replaced, and rows to insert (deduplicated). */
export interface UpsertPlan {
  /** Keys already present that the incoming rows replace. */
  remove: string[];
  /** Incoming rows, one per key (the last occurrence wins), in order of first appearance. */
  insert: KeyedRow[];
}

export function upsertPlan(
  existingKeys: { has(key: string): boolean },
  rows: readonly KeyedRow[],
): UpsertPlan {
  const byKey = new Map<string, KeyedRow>();
  for (const row of rows) byKey.set(row.key, row);
  const remove: string[] = [];
  for (const key of byKey.keys()) if (existingKeys.has(key)) remove.push(key);
  return { remove, insert: [...byKey.values()] };
}

/** One dataset's part of a ChartUpdate. */
export interface DatasetChange {
  /** Keys of the incoming rows that replace existing rows (empty: pure insert). */
  replaces: ReadonlySet<string>;
  /** Rows to insert, one per key. */
  rows: readonly KeyedRow[];
}

/** An accepted message, normalised for the views. */
export interface ChartUpdate {
  seq: number;
  /** A replay: every dataset is cleared before `changes` are inserted. */
  reset: boolean;
  changes: ReadonlyMap<string, DatasetChange>;
  /** Row count per dataset after this update. */
  counts: Readonly<Record<string, number>>;
}

/** A row that deletes its key (`{key, _deleted: true}`): how the kernel drops rows it sent. */
export function isTombstone(row: KeyedRow): boolean {
  return row._deleted === true;
}

/** The current rows of each dataset, by key. */
export class RowStore {
  private readonly sets = new Map<string, Map<string, KeyedRow>>();

  /** Applies an accepted update and returns its normalised form. */
  apply(update: AcceptedUpdate): ChartUpdate {
    const reset = update.kind === "reset";
    if (reset) for (const rows of this.sets.values()) rows.clear();
    const changes = new Map<string, DatasetChange>();
    for (const [name, rows] of Object.entries(update.data)) {
      if (rows === undefined) continue;
      let current = this.sets.get(name);
      if (current === undefined) {
        current = new Map();
        this.sets.set(name, current);
      }
      const plan = upsertPlan(current, rows);
      // A tombstone ({key, _deleted: true}) removes its key and inserts nothing.
      const insert = plan.insert.filter((row) => !isTombstone(row));
      for (const row of plan.insert) if (isTombstone(row)) current.delete(row.key);
      for (const row of insert) current.set(row.key, row);
      changes.set(name, { replaces: new Set(plan.remove), rows: insert });
    }
    return { seq: update.seq, reset, changes, counts: this.counts() };
  }

  count(name: string): number {
    return this.sets.get(name)?.size ?? 0;
  }

  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, rows] of this.sets) out[name] = rows.size;
    return out;
  }

  rows(name: string): KeyedRow[] {
    return [...(this.sets.get(name)?.values() ?? [])];
  }

  /** The current rows of a dataset, without copying. */
  values(name: string): Iterable<KeyedRow> {
    return this.sets.get(name)?.values() ?? [];
  }

  /** The whole state as a reset update, to fill a view built after data arrived. */
  snapshot(seq: number): ChartUpdate {
    const changes = new Map<string, DatasetChange>();
    for (const [name, rows] of this.sets) {
      changes.set(name, { replaces: new Set(), rows: [...rows.values()] });
    }
    return { seq, reset: true, changes, counts: this.counts() };
  }
}
