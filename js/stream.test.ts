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
import { type AcceptedUpdate, mergeUpdates, RowStore, StreamBuffer, upsertPlan } from "./stream";

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
  it("applies upserts at once, in seq order, and keeps their rows for the replay", () => {
    const s = new StreamBuffer(VIEW);
    expect(s.awaitingReplay).toBe(true);
    expect(s.appliedSeq).toBeNull();
    const data = { batches: [row("a", { v: 1 })] };
    expect(s.receive(up(1, data))).toEqual([{ kind: "upsert", seq: 1, data }]);
    expect(seqs(s.receive(up(2, { batches: [row("b")], set_sizes: [row("a")] })))).toEqual(["upsert:2"]);
    expect(seqs(s.receive(up(3)))).toEqual(["upsert:3"]); // no rows: nothing more kept
    expect(s.appliedSeq).toBe(3);
    expect(s.awaitingReplay).toBe(true);
    expect(s.replaySeq).toBeNull();
    expect(s.kept).toBe(3); // one row per dataset and key
    expect(s.pending).toBe(0); // nothing held back: all were shown
  });

  it("on the replay resets, then applies the kept rows with seq > replay.seq again as one upsert", () => {
    const s = new StreamBuffer(VIEW);
    const applied = [3, 4, 6, 5, 7].map((seq) => seqs(s.receive(up(seq, { batches: [row(`k${seq}`)] }))));
    // 5 arrives after 6 (out of order): kept, but not shown before the replay
    expect(applied).toEqual([["upsert:3"], ["upsert:4"], ["upsert:6"], [], ["upsert:7"]]);
    expect(s.kept).toBe(5);
    const out = s.receive(replay(5, { batches: [row("r")] }));
    expect(out).toEqual([
      { kind: "reset", seq: 5, data: { batches: [row("r")] } },
      { kind: "upsert", seq: 7, data: { batches: [row("k6"), row("k7")] } },
    ]);
    expect(s.awaitingReplay).toBe(false);
    expect(s.replaySeq).toBe(5);
    expect(s.appliedSeq).toBe(7);
    expect(s.kept).toBe(0);
    expect(s.pending).toBe(0);
    // the kept upserts are gone: later duplicates of them are ignored
    expect(s.receive(up(6))).toEqual([]);
    expect(s.receive(up(7))).toEqual([]);
    expect(seqs(s.receive(up(8)))).toEqual(["upsert:8"]);
  });

  it("re-applies the kept rows with their own data, per dataset", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(2, { batches: [row("a", { v: 2 })] }));
    s.receive(up(3, { set_sizes: [row("s", { v: 3 })], class_coverage: [] }));
    expect(s.receive(replay(1))).toEqual([
      { kind: "reset", seq: 1, data: { batches: [] } },
      {
        kind: "upsert",
        seq: 3,
        // a dataset named with no rows is named again (RowStore counts it)
        data: { batches: [row("a", { v: 2 })], set_sizes: [row("s", { v: 3 })], class_coverage: [] },
      },
    ]);
  });

  it("re-applies a key's newest row; a key kept only at seq <= replay.seq comes from the replay", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(2, { batches: [row("a", { v: 2 }), row("b", { v: 2 }), row("c", { v: 2 })] }));
    s.receive(up(4, { batches: [row("a", { v: 4 }), row("c", { v: 4 })], set_sizes: [row("s", { v: 4 })] }));
    s.receive(up(6, { batches: [row("a", { v: 6 }), row("d", { v: 6 })] }));
    s.receive(up(8, { batches: [row("a", { v: 8 }), row("a", { v: 8.5 })] })); // last in a message wins
    s.receive(up(7, { batches: [row("a", { v: 7 })] })); // late: older than 8
    s.receive(up(6, { batches: [row("d", { v: "dup" })] })); // a repeated seq (redelivery) changes nothing
    expect(s.kept).toBe(5);
    // The replay (state as of 5) no longer has "b" (dropped by the kernel) and has its own "c".
    const out = s.receive(replay(5, { batches: [row("a", { v: 5 }), row("c", { v: 5 })], set_sizes: [] }));
    expect(out).toEqual([
      { kind: "reset", seq: 5, data: { batches: [row("a", { v: 5 }), row("c", { v: 5 })], set_sizes: [] } },
      { kind: "upsert", seq: 8, data: { batches: [row("a", { v: 8.5 }), row("d", { v: 6 })] } },
    ]);
    const store = new RowStore();
    store.apply({ kind: "upsert", seq: 8, data: { batches: [row("b", { v: 2 })] } }); // shown before
    for (const u of out) store.apply(u);
    expect(store.rows("batches")).toEqual([row("a", { v: 8.5 }), row("c", { v: 5 }), row("d", { v: 6 })]);
    expect(store.counts()).toEqual({ batches: 3, set_sizes: 0 });
    expect(s.kept).toBe(0);
  });

  it("keeps at most one row per dataset and key, however many upserts arrive", () => {
    const s = new StreamBuffer(VIEW);
    const keys = 50;
    const last = new Map<string, number>();
    for (let seq = 1; seq <= 10_000; seq++) {
      const rows = [row(`k${(seq * 7) % keys}`, { seq }), row(`k${(seq * 13) % keys}`, { seq })];
      for (const r of rows) last.set(r.key, seq);
      expect(seqs(s.receive(up(seq, { batches: rows, set_sizes: [row(`s${seq % 3}`, { seq })] })))).toEqual([
        `upsert:${seq}`,
      ]);
      expect(s.kept).toBeLessThanOrEqual(keys + 3);
    }
    expect(s.kept).toBe(keys + 3);
    const out = s.receive(replay(9_990));
    expect(seqs(out)).toEqual(["reset:9990", "upsert:10000"]);
    const newer = [...last].filter(([, seq]) => seq > 9_990);
    expect(out[1]?.data.batches?.map((r) => [r.key, r.seq])).toEqual(expect.arrayContaining(newer));
    expect(out[1]?.data.batches).toHaveLength(newer.length);
    expect(s.kept).toBe(0);
  });

  it("does not apply a kept upsert equal to the replay seq again (already contained)", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(5));
    expect(seqs(s.receive(replay(5)))).toEqual(["reset:5"]);
    expect(s.appliedSeq).toBe(5);
  });

  it("accepts a replay newer than every kept upsert: a reset alone", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(3));
    s.receive(up(4));
    expect(seqs(s.receive(replay(9)))).toEqual(["reset:9"]);
    expect(s.appliedSeq).toBe(9);
    expect(s.receive(up(9))).toEqual([]);
    expect(seqs(s.receive(up(10)))).toEqual(["upsert:10"]);
  });

  it("applies an upsert delivered twice only once, and re-applies it once after the replay", () => {
    const s = new StreamBuffer(VIEW);
    expect(seqs(s.receive(up(2, { batches: [row("a")] })))).toEqual(["upsert:2"]);
    expect(s.receive(up(2, { batches: [row("a")] }))).toEqual([]);
    expect(s.kept).toBe(1);
    expect(seqs(s.receive(replay(1)))).toEqual(["reset:1", "upsert:2"]);
  });

  it("ignores replays for other views", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(up(1, { batches: [row("a")] }));
    expect(s.receive(replay(10, { batches: [row("x")] }, "view-b"))).toEqual([]);
    expect(s.awaitingReplay).toBe(true);
    expect(s.appliedSeq).toBe(1);
    expect(s.kept).toBe(1);
    expect(seqs(s.receive(up(2, { batches: [row("b")] })))).toEqual(["upsert:2"]); // still live
    expect(s.receive(replay(0))).toEqual([
      { kind: "reset", seq: 0, data: { batches: [] } },
      { kind: "upsert", seq: 2, data: { batches: [row("a"), row("b")] } },
    ]);
  });

  it("accepts a replay with no upserts before it (seq 0 or any start)", () => {
    const s = new StreamBuffer(VIEW);
    const out = s.receive(replay(0, { batches: [row("k")] }));
    expect(out).toEqual([{ kind: "reset", seq: 0, data: { batches: [row("k")] } }]);
    expect(s.appliedSeq).toBe(0);
    expect(s.replaySeq).toBe(0);
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
    expect(s.kept).toBe(0); // nothing is kept once the replay is in
  });

  it("ignores a replay older than what is shown, accepts a newer one as a reset", () => {
    const s = new StreamBuffer(VIEW);
    s.receive(replay(3));
    s.receive(up(4));
    expect(s.receive(replay(2))).toEqual([]);
    expect(s.receive(replay(3))).toEqual([]);
    expect(s.appliedSeq).toBe(4);
    expect(s.replaySeq).toBe(3);
    expect(seqs(s.receive(replay(9)))).toEqual(["reset:9"]);
    expect(s.replaySeq).toBe(9);
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

  it("queues upserts before the replay too while paused (nothing is shown)", () => {
    const s = new StreamBuffer(VIEW, { paused: true });
    expect(s.receive(up(1, { batches: [row("a")] }))).toEqual([]);
    expect(s.appliedSeq).toBeNull();
    expect(s.pending).toBe(1);
    expect(s.kept).toBe(0);
    expect(seqs(s.setPaused(false))).toEqual(["upsert:1"]);
    expect(s.kept).toBe(1);
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
    expect(seqs(s.setPaused(false))).toEqual(["upsert:1", "upsert:2", "reset:1", "upsert:2", "upsert:3"]);
    expect(s.appliedSeq).toBe(3);
    expect(s.kept).toBe(0);
  });

  it("does not lose upserts shown before the replay when paused in between", () => {
    const s = new StreamBuffer(VIEW);
    expect(seqs(s.receive(up(5)))).toEqual(["upsert:5"]);
    s.setPaused(true);
    s.receive(replay(4));
    s.receive(up(6));
    expect(s.pending).toBe(2);
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

describe("mergeUpdates", () => {
  it("returns null for nothing and a single update unchanged", () => {
    expect(mergeUpdates([])).toBeNull();
    const u: AcceptedUpdate = { kind: "upsert", seq: 3, data: { batches: [row("a")] } };
    expect(mergeUpdates([u])).toBe(u);
  });

  it("merges upserts per dataset by key, later rows winning, keeping first positions", () => {
    const merged = mergeUpdates([
      { kind: "upsert", seq: 1, data: { batches: [row("a", { v: 1 }), row("b", { v: 1 })] } },
      { kind: "upsert", seq: 2, data: { batches: [row("c", { v: 2 }), row("a", { v: 2 })], set_sizes: [row("s")] } },
      { kind: "upsert", seq: 3, data: { batches: [row("b", { v: 3 })], class_coverage: undefined } },
    ]);
    expect(merged).toEqual({
      kind: "upsert",
      seq: 3,
      data: {
        batches: [row("a", { v: 2 }), row("b", { v: 3 }), row("c", { v: 2 })],
        set_sizes: [row("s")],
      },
    });
  });

  it("starts from the last reset: what came before it is dropped, the result is a reset", () => {
    const merged = mergeUpdates([
      { kind: "upsert", seq: 5, data: { batches: [row("old", { v: 5 })], set_sizes: [row("gone")] } },
      { kind: "reset", seq: 2, data: { batches: [row("x")] } },
      { kind: "reset", seq: 4, data: { batches: [row("a", { v: 4 })] } },
      { kind: "upsert", seq: 5, data: { batches: [row("a", { v: 5 }), row("b", { v: 5 })] } },
      { kind: "upsert", seq: 6, data: { class_coverage: [row("c")] } },
    ]);
    expect(merged).toEqual({
      kind: "reset",
      seq: 6,
      data: { batches: [row("a", { v: 5 }), row("b", { v: 5 })], class_coverage: [row("c")] },
    });
  });

  it("has the same effect on a RowStore as applying the updates one by one", () => {
    const updates: AcceptedUpdate[] = [
      { kind: "upsert", seq: 1, data: { batches: [row("a", { v: 1 })], set_sizes: [row("s", { v: 1 })] } },
      { kind: "reset", seq: 1, data: { batches: [row("a", { v: 1 }), row("z", { v: 0 })] } },
      { kind: "upsert", seq: 2, data: { batches: [row("a", { v: 2 }), row("b", { v: 2 })] } },
      { kind: "upsert", seq: 3, data: { batches: [row("b", { v: 3 })], set_sizes: [row("t", { v: 3 })] } },
    ];
    const base = () => {
      const store = new RowStore();
      store.apply({ kind: "upsert", seq: 0, data: { batches: [row("q")], class_coverage: [row("c")] } });
      return store;
    };
    const oneByOne = base();
    for (const u of updates) oneByOne.apply(u);
    const merged = base();
    const update = merged.apply(mergeUpdates(updates) as AcceptedUpdate);
    for (const name of ["batches", "set_sizes", "class_coverage"]) {
      expect(merged.rows(name)).toEqual(oneByOne.rows(name));
    }
    expect(update).toMatchObject({ seq: 3, reset: true, counts: { batches: 3, set_sizes: 1, class_coverage: 0 } });
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

function prng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

describe("ordering end to end (simulated kernel, random interleavings)", () => {
  // A kernel streams upserts (seq 1..N, keys from a small pool so later rows replace earlier
  // ones, and a key is upserted repeatedly on both sides of the replay's seq); before the replay
  // is computed it also drops rows now and then (no message: only the replay shows it). The view
  // renders after a random number of upserts (it never sees those), its replay is computed at a
  // random later point and may reach it several upserts later; the user toggles pause at random,
  // and the view hands what it accepted to the store in random groups (merged, as the widget
  // does while an apply is in flight). Whatever the interleaving: upserts are shown as they
  // arrive (also before the replay), every row shown is the kernel's newest upsert of its key as
  // of the shown seq (and exactly the kernel's state once the replay is in), the shown seq never
  // goes back, and the view ends with the kernel's state.
  const asObject = (rows: Iterable<KeyedRow>) => Object.fromEntries([...rows].map((r) => [r.key, r.seq]));

  interface Stats {
    /** Upserts shown live before the replay. */
    liveBeforeReplay: number;
    /** Keys kept at seqs on both sides of replay.seq, at least twice above it. */
    acrossReplay: number;
    /** Keys kept only at seqs <= replay.seq whose kept row differs from the replay's (dropped). */
    fromReplay: number;
  }

  /** Runs one interleaving (asserting as it goes). */
  function simulate(seed: number): Stats {
    const rand = prng(seed);
    const kernel = new Map<string, KeyedRow>();
    const kernelAt: Map<string, KeyedRow>[] = [new Map()]; // state after each seq
    const upserted = new Map<string, KeyedRow>(); // newest upsert per key, drops aside
    const upsertedAt: Map<string, KeyedRow>[] = [new Map()];
    const messages: KernelMessage[] = [];
    const n = 30;
    const start = Math.floor(rand() * (n + 1)); // upserts 1..start were sent before the view
    const replayAt = start + Math.floor(rand() * (n - start + 1));
    const delay = Math.floor(rand() * 7);
    let pendingReplay: { due: number; msg: ReplayMessage } | null = null;
    let theReplay: ReplayMessage | null = null;
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
        theReplay = pendingReplay.msg;
        pendingReplay = null;
      }
      if (i >= n) continue;
      seq += 1;
      const rows = Array.from({ length: 1 + Math.floor(rand() * 3) }, () =>
        row(`k${Math.floor(rand() * 8)}`, { seq }),
      );
      for (const r of rows) {
        kernel.set(r.key, r);
        upserted.set(r.key, r);
      }
      // the kernel drops a row (only before the replay is computed: the view learns it from it)
      if (i < replayAt && kernel.size > 0 && rand() < 0.2) {
        kernel.delete([...kernel.keys()][Math.floor(rand() * kernel.size)] ?? "");
      }
      kernelAt.push(new Map(kernel));
      upsertedAt.push(new Map(upserted));
      if (seq <= start) continue; // the view did not exist yet
      messages.push(up(seq, { batches: rows }));
      if (rand() < 0.1) messages.push(up(seq, { batches: rows })); // duplicate delivery
    }

    // What the view keeps before its replay: the upserts that reach it before the replay.
    const stats: Stats = { liveBeforeReplay: 0, acrossReplay: 0, fromReplay: 0 };
    if (theReplay !== null) {
      const replaySeq = theReplay.seq;
      const keptSeqs = new Map<string, number[]>();
      for (const msg of messages.slice(0, messages.indexOf(theReplay))) {
        if (msg.kind !== "upsert") continue;
        for (const r of msg.data.batches ?? []) keptSeqs.set(r.key, [...(keptSeqs.get(r.key) ?? []), msg.seq]);
      }
      const inReplay = asObject(theReplay.data.batches ?? []);
      for (const [key, list] of keptSeqs) {
        const above = new Set(list.filter((x) => x > replaySeq)).size;
        if (above >= 2 && list.some((x) => x <= replaySeq)) stats.acrossReplay += 1;
        if (above === 0 && inReplay[key] !== Math.max(...list)) stats.fromReplay += 1;
      }
    }

    const view = new StreamBuffer(VIEW);
    const store = new RowStore();
    const waiting: AcceptedUpdate[] = [];
    const shown: number[] = [];
    const flush = () => {
      const merged = mergeUpdates(waiting.splice(0));
      if (merged === null) return;
      const update = store.apply(merged);
      shown.push(update.seq);
      const got = asObject(store.rows("batches"));
      if (view.awaitingReplay) {
        // a subset of the newest upserts as of the shown seq (drops show up with the replay)
        const at = upsertedAt[update.seq] ?? new Map();
        for (const [key, s] of Object.entries(got)) expect(s).toBe(at.get(key)?.seq);
      } else {
        expect(got).toEqual(asObject((kernelAt[update.seq] ?? new Map()).values()));
      }
    };
    const accept = (updates: AcceptedUpdate[]) => {
      waiting.push(...updates);
      if (rand() < 0.6) flush();
    };
    for (const msg of messages) {
      if (rand() < 0.15) accept(view.setPaused(!view.paused));
      const before = view.appliedSeq ?? Number.NEGATIVE_INFINITY;
      const out = view.receive(msg);
      if (!view.paused && msg.kind === "upsert" && msg.seq > before) {
        // shown at once, replay or not
        expect(out.map((u) => `${u.kind}:${u.seq}`)).toEqual([`upsert:${msg.seq}`]);
        expect(view.appliedSeq).toBe(msg.seq);
        if (view.awaitingReplay) stats.liveBeforeReplay += 1;
      }
      expect(view.kept).toBeLessThanOrEqual(8); // one row per key of the pool
      accept(out);
    }
    accept(view.setPaused(false));
    flush();
    expect(shown).toEqual([...shown].sort((a, b) => a - b));
    expect(view.appliedSeq).toBe(n);
    expect(view.awaitingReplay).toBe(false);
    expect(view.kept).toBe(0);
    expect(asObject(store.rows("batches"))).toEqual(asObject(kernel.values()));
    return stats;
  }

  const SEEDS = Array.from({ length: 60 }, (_, i) => i + 1);
  for (const seed of SEEDS) {
    it(`converges to the kernel state (seed ${seed})`, () => {
      simulate(seed);
    });
  }

  it("exercises live upserts before the replay, keys kept across replay.seq, and rows only the replay has right", () => {
    const stats = SEEDS.map(simulate);
    expect(stats.filter((s) => s.liveBeforeReplay > 0).length).toBeGreaterThan(SEEDS.length / 2);
    expect(stats.filter((s) => s.acrossReplay > 0).length).toBeGreaterThan(SEEDS.length / 4);
    expect(stats.filter((s) => s.fromReplay > 0).length).toBeGreaterThan(SEEDS.length / 4);
  });
});

describe("StreamBuffer matches re-applying every kept message (random message streams)", () => {
  // The buffer used to keep every upsert message before the replay and apply those with
  // seq > replay.seq again one by one, in seq order. It now keeps only the newest row per key;
  // whatever arrives (out of order, repeated, with empty or absent datasets, several replays,
  // other views' replays, pauses), the rows, row counts and seqs must come out the same.
  class MessageListBuffer {
    paused = false;
    appliedSeq: number | null = null;
    replaySeq: number | null = null;
    private readonly kept = new Map<number, UpsertMessage>();
    private readonly queue: KernelMessage[] = [];
    receive(msg: KernelMessage): AcceptedUpdate[] {
      if (msg.kind === "replay" && msg.view !== VIEW) return [];
      if (this.paused) {
        this.queue.push(msg);
        return [];
      }
      return this.process(msg);
    }
    setPaused(paused: boolean): AcceptedUpdate[] {
      if (paused === this.paused) return [];
      this.paused = paused;
      return paused ? [] : this.queue.splice(0).flatMap((m) => this.process(m));
    }
    private process(msg: KernelMessage): AcceptedUpdate[] {
      if (msg.kind === "upsert") {
        if (this.replaySeq === null) {
          if (this.kept.has(msg.seq)) return [];
          this.kept.set(msg.seq, msg);
        }
        return this.take(msg);
      }
      if (this.replaySeq !== null && this.appliedSeq !== null && msg.seq < this.appliedSeq) return [];
      this.replaySeq = msg.seq;
      this.appliedSeq = msg.seq;
      const out: AcceptedUpdate[] = [{ kind: "reset", seq: msg.seq, data: msg.data }];
      const kept = [...this.kept.values()].sort((a, b) => a.seq - b.seq);
      this.kept.clear();
      for (const u of kept) out.push(...this.take(u));
      return out;
    }
    private take(msg: UpsertMessage): AcceptedUpdate[] {
      if (this.appliedSeq !== null && msg.seq <= this.appliedSeq) return [];
      this.appliedSeq = msg.seq;
      return [{ kind: "upsert", seq: msg.seq, data: msg.data }];
    }
  }

  const NAMES = ["batches", "set_sizes"];
  function randomData(rand: () => number, tag: string): DataBatch {
    const data: DataBatch = {};
    for (const name of NAMES) {
      const r = rand();
      if (r < 0.3) continue; // absent
      const rows = r < 0.4 ? [] : Array.from({ length: 1 + Math.floor(rand() * 4) }, (_, i) => row(`k${Math.floor(rand() * 5)}`, { tag, i }));
      data[name] = rows;
    }
    return data;
  }
  const state = (store: RowStore) => ({
    counts: store.counts(),
    rows: Object.fromEntries(NAMES.map((name) => [name, Object.fromEntries(store.rows(name).map((r) => [r.key, r]))])),
  });

  for (let seed = 1; seed <= 200; seed++) {
    it(`gives the same rows, counts and seqs (seed ${seed})`, () => {
      const rand = prng(seed * 7919);
      const upserts = new Map<number, UpsertMessage>(); // one message per seq: a repeat is a redelivery
      const oldView = new MessageListBuffer();
      const view = new StreamBuffer(VIEW);
      const oldStore = new RowStore();
      const store = new RowStore();
      const steps = 10 + Math.floor(rand() * 40);
      for (let step = 0; step < steps; step++) {
        const r = rand();
        let a: AcceptedUpdate[];
        let b: AcceptedUpdate[];
        if (r < 0.1) {
          const paused = rand() < 0.5;
          a = oldView.setPaused(paused);
          b = view.setPaused(paused);
        } else {
          let msg: KernelMessage;
          const s = Math.floor(rand() * 20);
          if (r < 0.2) msg = replay(s, randomData(rand, `replay${step}`), rand() < 0.3 ? "view-b" : VIEW);
          else {
            msg = upserts.get(s) ?? up(s, randomData(rand, `up${s}`));
            upserts.set(s, msg);
          }
          a = oldView.receive(msg);
          b = view.receive(msg);
          expect(b.length).toBeLessThanOrEqual(2); // a replay: the reset and one merged upsert
        }
        for (const u of a) oldStore.apply(u);
        for (const u of b) store.apply(u);
        expect(state(store)).toEqual(state(oldStore));
        expect(view.appliedSeq).toBe(oldView.appliedSeq);
        expect(view.replaySeq).toBe(oldView.replaySeq);
        expect(view.paused).toBe(oldView.paused);
        if (view.awaitingReplay) expect(view.kept).toBeLessThanOrEqual(NAMES.length * 5);
        else expect(view.kept).toBe(0);
        expect(a.length === 0).toBe(b.length === 0);
        if (a.length > 0) expect(b.map((u) => u.kind)[0]).toBe(a[0]?.kind);
        if (a.length > 0) expect(b[b.length - 1]?.seq).toBe(a[a.length - 1]?.seq);
      }
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

  it("keeps the kernel's start time of an upsert when it is a finite number", () => {
    const data = { batches: [{ key: "a" }] };
    expect(parseKernelMessage({ kind: "upsert", seq: 2, data, t0: 1_700_000_000_123.5 })).toEqual({
      kind: "upsert",
      seq: 2,
      data,
      t0: 1_700_000_000_123.5,
    });
    expect(parseKernelMessage({ kind: "upsert", seq: 2, data, t0: "soon" })).toEqual({ kind: "upsert", seq: 2, data });
    expect(parseKernelMessage({ kind: "upsert", seq: 2, data, t0: null })).toEqual({ kind: "upsert", seq: 2, data });
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
