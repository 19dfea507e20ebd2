// Ordering of the kernel's data stream, pure and DOM-free (unit-tested in stream.test.ts).
//
// StreamBuffer decides *which* messages take effect and in which order:
//   - upserts take effect as they arrive, also before this view's replay (a kernel busy with a
//     long cell answers the view's replay-request only when it is idle again, and the view must
//     stay live meanwhile). Upserts are keyed, so applying one the replay also contains is
//     harmless;
//   - until the replay arrives, every upsert is also kept. On the replay for this view, every
//     dataset is reset to the replay's content and the kept upserts with seq > replay.seq are
//     applied again, in seq order; then the kept upserts are dropped. (A view rendered after
//     earlier upserts shows partial data until then, and is complete from the replay on.)
//   - replays for other views are ignored; duplicate / stale upserts (seq <= highest applied)
//     take no effect (before the replay a stale one is still kept, for the replay); a replay
//     older than what is shown after the first replay is ignored;
//   - while paused everything is queued, and processed through the same rules on resume.
// mergeUpdates folds several accepted updates into one (a backlog is applied as one changeset).
// RowStore keeps the current rows per dataset, upserting by key, and turns each accepted update
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
  private _replaySeq: number | null = null;
  /** Upserts seen before this view's replay, by seq (a repeated seq keeps the first). */
  private readonly keptForReplay = new Map<number, UpsertMessage>();
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

  /** Upserts kept (already applied) to be applied again after the replay. */
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
    if (this._replaySeq === null) {
      if (this.keptForReplay.has(msg.seq)) return []; // duplicate delivery
      this.keptForReplay.set(msg.seq, msg);
    }
    return this.take(msg);
  }

  /** Applies an upsert unless it is a duplicate or older than what is shown. */
  private take(msg: UpsertMessage): AcceptedUpdate[] {
    if (this._appliedSeq !== null && msg.seq <= this._appliedSeq) return [];
    this._appliedSeq = msg.seq;
    return [{ kind: "upsert", seq: msg.seq, data: msg.data }];
  }

  private processReplay(msg: ReplayMessage): AcceptedUpdate[] {
    // After the first replay, an older one would move the view back in time. Before it, the
    // replay may be older than upserts already shown: those are kept and applied again below.
    if (this._replaySeq !== null && this._appliedSeq !== null && msg.seq < this._appliedSeq) return [];
    this._replaySeq = msg.seq;
    this._appliedSeq = msg.seq;
    const out: AcceptedUpdate[] = [{ kind: "reset", seq: msg.seq, data: msg.data }];
    const kept = [...this.keptForReplay.values()].sort((a, b) => a.seq - b.seq);
    this.keptForReplay.clear();
    for (const upsert of kept) out.push(...this.take(upsert));
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
