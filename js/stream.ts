// Ordering of the kernel's data stream, pure and DOM-free (unit-tested in stream.test.ts).
//
// StreamBuffer decides *which* messages take effect and in which order:
//   - before this view's replay arrives, upserts are buffered;
//   - on the replay for this view, buffered upserts with seq <= replay.seq are dropped (the replay
//     already contains them) and the rest follow in seq order;
//   - replays for other views are ignored; duplicate / stale upserts (seq <= last applied) too;
//   - while paused everything is queued, and replayed through the same rules on resume.
// RowStore keeps the current rows per dataset, upserting by key, and turns each accepted message
// into a ChartUpdate (deduplicated rows plus the keys they replace) for the Vega views.

import type { DataBatch, KernelMessage, KeyedRow, ReplayMessage, UpsertMessage } from "./model";

/** A message that takes effect now: a replay resets every dataset, an upsert merges by key. */
export type AcceptedUpdate =
  | { kind: "reset"; seq: number; data: DataBatch }
  | { kind: "upsert"; seq: number; data: DataBatch };

export class StreamBuffer {
  readonly viewId: string;
  private _paused: boolean;
  private _appliedSeq: number | null = null;
  /** Upserts seen before this view's replay, by seq (a repeated seq keeps the first). */
  private readonly beforeReplay = new Map<number, UpsertMessage>();
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
    return this._appliedSeq === null;
  }

  /** Seq of the last message that took effect (null before the replay). */
  get appliedSeq(): number | null {
    return this._appliedSeq;
  }

  /** Messages held back: queued while paused plus upserts waiting for the replay. */
  get pending(): number {
    return this.pausedQueue.length + this.beforeReplay.size;
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
    if (this._appliedSeq === null) {
      if (!this.beforeReplay.has(msg.seq)) this.beforeReplay.set(msg.seq, msg);
      return [];
    }
    if (msg.seq <= this._appliedSeq) return []; // duplicate or already contained in the replay
    this._appliedSeq = msg.seq;
    return [{ kind: "upsert", seq: msg.seq, data: msg.data }];
  }

  private processReplay(msg: ReplayMessage): AcceptedUpdate[] {
    // A replay older than what is already shown would move the view back in time.
    if (this._appliedSeq !== null && msg.seq < this._appliedSeq) return [];
    this._appliedSeq = msg.seq;
    const out: AcceptedUpdate[] = [{ kind: "reset", seq: msg.seq, data: msg.data }];
    const buffered = [...this.beforeReplay.values()].sort((a, b) => a.seq - b.seq);
    this.beforeReplay.clear();
    for (const upsert of buffered) out.push(...this.processUpsert(upsert));
    return out;
  }
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
      for (const row of plan.insert) current.set(row.key, row);
      changes.set(name, { replaces: new Set(plan.remove), rows: plan.insert });
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

  /** The whole state as a reset update, to fill a view built after data arrived. */
  snapshot(seq: number): ChartUpdate {
    const changes = new Map<string, DatasetChange>();
    for (const [name, rows] of this.sets) {
      changes.set(name, { replaces: new Set(), rows: [...rows.values()] });
    }
    return { seq, reset: true, changes, counts: this.counts() };
  }
}
