import { describe, expect, it } from "vitest";
import {
  type DataBatch,
  type KernelMessage,
  type KeyedRow,
  parseKernelMessage,
  ProtocolError,
  type ReplayMessage,
  type UpsertMessage,
} from "./model";
import { type AcceptedUpdate, RowStore, StreamBuffer, upsertPlan } from "./stream";

const VIEW = "view-a";

function row(key: string, extra: Record<string, unknown> = {}): KeyedRow {
  return { key, ...extra };
}
function up(seq: number, data: DataBatch = { batches: [] }): UpsertMessage {
  return { kind: "upsert", seq, data };
}
function replay(seq: number, data: DataBatch = { batches: [] }, view = VIEW): ReplayMessage {
  return { kind: "replay", view, seq, data };
}
function seqs(updates: AcceptedUpdate[]): string[] {
  return updates.map((u) => `${u.kind}:${u.seq}`);
}

describe("StreamBuffer before the replay", () => {
  it("buffers upserts until the replay for this view arrives", () => {
    const s = new StreamBuffer(VIEW);
    expect(s.awaitingReplay).toBe(true);
    expect(s.receive(up(1))).toEqual([]);
    expect(s.receive(up(2))).toEqual([]);
    expect(s.pending).toBe(2);
    expect(s.appliedSeq).toBeNull();
  });

  it("drops buffered upserts with seq <= replay.seq and applies the rest in seq order", () => {
    const s = new StreamBuffer(VIEW);
    for (const seq of [3, 4, 6, 5, 7]) s.receive(up(seq));
    const out = s.receive(replay(5));
    expect(seqs(out)).toEqual(["reset:5", "upsert:6", "upsert:7"]);
    expect(s.awaitingReplay).toBe(false);
    expect(s.appliedSeq).toBe(7);
    expect(s.pending).toBe(0);
  });

  it("keeps a buffered upsert equal to the replay seq out (already contained)", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(5));
    expect(seqs(s.receive(replay(5)))).toEqual(["reset:5"]);
  });

  it("applies a buffered upsert delivered twice only once", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(2, { batches: [row("a")] }));
    s.receive(up(2, { batches: [row("a")] }));
    expect(s.pending).toBe(1);
    expect(seqs(s.receive(replay(1)))).toEqual(["reset:1", "upsert:2"]);
  });

  it("ignores replays for other views", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(1));
    expect(s.receive(replay(10, { batches: [row("x")] }, "view-b"))).toEqual([]);
    expect(s.awaitingReplay).toBe(true);
    expect(s.pending).toBe(1);
    expect(seqs(s.receive(replay(0)))).toEqual(["reset:0", "upsert:1"]);
  });

  it("accepts a replay with no upserts before it (seq 0 or any start)", () => {
    const s = new StreamBuffer(VIEW);
    const out = s.receive(replay(0, { batches: [row("k")] }));
    expect(out).toEqual([{ kind: "reset", seq: 0, data: { batches: [row("k")] } }]);
  });
});

describe("StreamBuffer after the replay", () => {
  it("applies live upserts at once and drops duplicates and stale seqs", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(3));
    expect(seqs(s.receive(up(2)))).toEqual([]);
    expect(seqs(s.receive(up(3)))).toEqual([]);
    expect(seqs(s.receive(up(4)))).toEqual(["upsert:4"]);
    expect(seqs(s.receive(up(4)))).toEqual([]);
    expect(seqs(s.receive(up(5)))).toEqual(["upsert:5"]);
    expect(s.appliedSeq).toBe(5);
  });

  it("ignores a replay older than what is shown, accepts a newer one as a reset", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(3));
    s.receive(up(4));
    expect(s.receive(replay(2))).toEqual([]);
    expect(seqs(s.receive(replay(9)))).toEqual(["reset:9"]);
    expect(seqs(s.receive(up(9)))).toEqual([]);
    expect(seqs(s.receive(up(10)))).toEqual(["upsert:10"]);
  });

  it("passes the message data through unchanged", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(0));
    const data = { set_sizes: [row("1|a|1", { size: 1, count: 3 })] };
    expect(s.receive(up(1, data))).toEqual([{ kind: "upsert", seq: 1, data }]);
  });
});

describe("StreamBuffer pause / resume", () => {
  it("queues everything while paused and flushes in order on resume", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(0));
    expect(s.setPaused(true)).toEqual([]);
    expect(s.receive(up(1))).toEqual([]);
    expect(s.receive(up(2))).toEqual([]);
    expect(s.receive(up(3))).toEqual([]);
    expect(s.pending).toBe(3);
    expect(s.appliedSeq).toBe(0);
    expect(seqs(s.setPaused(false))).toEqual(["upsert:1", "upsert:2", "upsert:3"]);
    expect(s.pending).toBe(0);
    expect(seqs(s.receive(up(4)))).toEqual(["upsert:4"]);
  });

  it("handles a replay that arrives while paused through the same rules on resume", () => {
    const s = new StreamBuffer(VIEW, { paused: true });
    expect(s.paused).toBe(true);
    s.receive(up(1));
    s.receive(up(2));
    s.receive(replay(1));
    s.receive(up(3));
    s.receive(replay(7, {}, "other")); // never queued
    expect(s.pending).toBe(4);
    expect(seqs(s.setPaused(false))).toEqual(["reset:1", "upsert:2", "upsert:3"]);
  });

  it("does not lose upserts buffered before the replay when paused in between", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(5));
    s.setPaused(true);
    s.receive(replay(4));
    s.receive(up(6));
    expect(s.pending).toBe(3);
    expect(seqs(s.setPaused(false))).toEqual(["reset:4", "upsert:5", "upsert:6"]);
  });

  it("treats repeated pause / resume calls as no-ops", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(0));
    s.setPaused(true);
    s.receive(up(1));
    expect(s.setPaused(true)).toEqual([]);
    expect(seqs(s.setPaused(false))).toEqual(["upsert:1"]);
    expect(s.setPaused(false)).toEqual([]);
  });
});

describe("upsertPlan", () => {
  it("removes existing keys and inserts every incoming row", () => {
    const plan = upsertPlan(new Set(["a", "b"]), [row("b", { v: 2 }), row("c", { v: 3 })]);
    expect(plan.remove).toEqual(["b"]);
    expect(plan.insert).toEqual([row("b", { v: 2 }), row("c", { v: 3 })]);
  });

  it("keeps the last row of a key repeated in one batch, at its first position", () => {
    const plan = upsertPlan(new Set<string>(), [row("a", { v: 1 }), row("b"), row("a", { v: 9 })]);
    expect(plan.remove).toEqual([]);
    expect(plan.insert).toEqual([row("a", { v: 9 }), row("b")]);
  });

  it("returns nothing for no rows", () => {
    expect(upsertPlan(new Set(["a"]), [])).toEqual({ remove: [], insert: [] });
  });
});

describe("RowStore", () => {
  it("replaces rows by key when late labels arrive", () => {
    const store = new RowStore();
    store.apply({
      kind: "reset",
      seq: 0,
      data: {
        batches: [
          row("0|aps", { batch: 0, coverage: null, n_labelled: 0 }),
          row("0|lac", { batch: 0, coverage: null, n_labelled: 0 }),
        ],
      },
    });
    const update = store.apply({
      kind: "upsert",
      seq: 1,
      data: {
        batches: [
          row("0|aps", { batch: 0, coverage: 0.9, n_labelled: 10 }),
          row("1|aps", { batch: 1, coverage: null, n_labelled: 0 }),
        ],
      },
    });
    expect(store.count("batches")).toBe(3);
    expect(store.rows("batches").find((r) => r.key === "0|aps")).toMatchObject({ coverage: 0.9 });
    expect(store.rows("batches").find((r) => r.key === "0|lac")).toMatchObject({ coverage: null });
    expect(update.reset).toBe(false);
    expect([...(update.changes.get("batches")?.replaces ?? [])]).toEqual(["0|aps"]);
    expect(update.changes.get("batches")?.rows).toHaveLength(2);
    expect(update.counts).toEqual({ batches: 3 });
  });

  it("deduplicates keys within one message", () => {
    const store = new RowStore();
    const update = store.apply({
      kind: "upsert",
      seq: 1,
      data: { set_sizes: [row("k", { count: 1 }), row("k", { count: 2 })] },
    });
    expect(store.count("set_sizes")).toBe(1);
    expect(store.rows("set_sizes")[0]).toMatchObject({ count: 2 });
    expect(update.changes.get("set_sizes")?.rows).toEqual([row("k", { count: 2 })]);
  });

  it("on a replay clears every dataset, also those the replay does not mention", () => {
    const store = new RowStore();
    store.apply({ kind: "upsert", seq: 1, data: { batches: [row("a"), row("b")], set_sizes: [row("s")] } });
    const update = store.apply({ kind: "reset", seq: 2, data: { batches: [row("c")] } });
    expect(update.reset).toBe(true);
    expect(store.rows("batches").map((r) => r.key)).toEqual(["c"]);
    expect(store.count("set_sizes")).toBe(0);
    expect(update.counts).toEqual({ batches: 1, set_sizes: 0 });
    expect(update.changes.get("batches")?.replaces.size).toBe(0);
  });

  it("snapshots the whole state as a reset update", () => {
    const store = new RowStore();
    store.apply({ kind: "upsert", seq: 4, data: { batches: [row("a")], class_coverage: [row("c")] } });
    const snap = store.snapshot(4);
    expect(snap).toMatchObject({ seq: 4, reset: true, counts: { batches: 1, class_coverage: 1 } });
    expect(snap.changes.get("class_coverage")?.rows).toEqual([row("c")]);
  });
});

describe("ordering end to end (simulated kernel, random interleavings)", () => {
  // A kernel streams upserts (seq 1..N, keys from a small pool so later rows replace earlier
  // ones), answers the view's replay request at a random point with its whole state, and the
  // user toggles pause at random. Whatever the interleaving, the view ends with the kernel's
  // state and applies seqs strictly increasing.
  function prng(seed: number): () => number {
    let x = seed >>> 0;
    return () => {
      x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
      return x / 2 ** 32;
    };
  }

  for (let seed = 1; seed <= 40; seed++) {
    it(`converges to the kernel state (seed ${seed})`, () => {
      const rand = prng(seed);
      const kernel = new Map<string, KeyedRow>();
      const messages: KernelMessage[] = [];
      const n = 30;
      const replayAt = Math.floor(rand() * (n + 1));
      // The replay is computed at `replayAt` but may reach the view a few upserts later.
      const delay = Math.floor(rand() * 4);
      let pendingReplay: { due: number; msg: ReplayMessage } | null = null;
      let seq = 0;
      for (let i = 0; i <= n + delay; i++) {
        if (i === replayAt) {
          const state = { batches: [...kernel.values()].map((r) => ({ ...r })) };
          pendingReplay = { due: i + delay, msg: replay(seq, state) };
        }
        if (pendingReplay !== null && i === pendingReplay.due) {
          // another view's replay first: must be ignored
          messages.push(replay(seq, { batches: [row("junk")] }, "view-b"));
          messages.push(pendingReplay.msg);
          pendingReplay = null;
        }
        if (i >= n) continue;
        seq += 1;
        const rows = Array.from({ length: 1 + Math.floor(rand() * 3) }, () =>
          row(`k${Math.floor(rand() * 8)}`, { seq }),
        );
        for (const r of rows) kernel.set(r.key, r);
        messages.push(up(seq, { batches: rows }));
        if (rand() < 0.1) messages.push(up(seq, { batches: rows })); // duplicate delivery
      }
      const view = new StreamBuffer(VIEW);
      const store = new RowStore();
      const applied: number[] = [];
      const apply = (updates: AcceptedUpdate[]) => {
        for (const u of updates) {
          applied.push(u.seq);
          store.apply(u);
        }
      };
      for (const msg of messages) {
        if (rand() < 0.15) apply(view.setPaused(!view.paused));
        apply(view.receive(msg));
      }
      apply(view.setPaused(false));
      expect(applied).toEqual([...applied].sort((a, b) => a - b));
      expect(new Set(applied).size).toBe(applied.length);
      expect(view.appliedSeq).toBe(n);
      const got = Object.fromEntries(store.rows("batches").map((r) => [r.key, r.seq]));
      const want = Object.fromEntries([...kernel.values()].map((r) => [r.key, r.seq]));
      expect(got).toEqual(want);
    });
  }
});

describe("parseKernelMessage", () => {
  it("parses upserts and replays", () => {
    expect(parseKernelMessage({ kind: "upsert", seq: 1, data: { batches: [{ key: "a" }] } })).toEqual({
      kind: "upsert",
      seq: 1,
      data: { batches: [{ key: "a" }] },
    });
    expect(parseKernelMessage({ kind: "replay", view: "v", seq: 0, data: {} })).toEqual({
      kind: "replay",
      view: "v",
      seq: 0,
      data: {},
    });
  });

  it("returns null for other kinds", () => {
    expect(parseKernelMessage({ kind: "something-new" })).toBeNull();
    expect(parseKernelMessage("upsert")).toBeNull();
  });

  it("rejects malformed upserts and replays", () => {
    expect(() => parseKernelMessage({ kind: "upsert", data: {} })).toThrow(ProtocolError);
    expect(() => parseKernelMessage({ kind: "upsert", seq: 1.5, data: {} })).toThrow(/integer/);
    expect(() => parseKernelMessage({ kind: "upsert", seq: 1, data: { batches: {} } })).toThrow(/array/);
    expect(() => parseKernelMessage({ kind: "upsert", seq: 1, data: { batches: [{ key: 3 }] } })).toThrow(
      /string "key"/,
    );
    expect(() => parseKernelMessage({ kind: "replay", seq: 1, data: {} })).toThrow(/view/);
  });
});
