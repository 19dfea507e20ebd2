import { afterEach, describe, expect, it, vi } from "vitest";
import type { VegaLiteSpec } from "./model";
import { Chart } from "./charts";
import { FakeModel } from "./test-utils";
import widget, { MAX_IDLE_GAP_MS, epochNow, idleGapMs, latencySink, namedBatches, renderView } from "./widget";

const batchesSpec: VegaLiteSpec = {
  params: [{ name: "calibrator", value: "(all)" }],
  data: { name: "batches" },
  transform: [{ filter: "calibrator == '(all)' || datum.calibrator == calibrator" }],
  mark: "point",
  encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" } },
  height: 100,
};
const setSizesSpec: VegaLiteSpec = {
  params: [{ name: "calibrator", value: "(all)" }],
  data: { name: "set_sizes" },
  mark: "bar",
  encoding: { x: { field: "size", type: "ordinal" }, y: { field: "count", type: "quantitative" } },
  height: 100,
};

function b(batch: number, calibrator: string, coverage: number | null) {
  return { key: `${batch}|${calibrator}`, batch, calibrator, coverage };
}

const cleanups: (() => void)[] = [];
function mount(model: FakeModel, viewId = "v1") {
  const el = document.createElement("div");
  document.body.append(el);
  const cleanup = renderView(model, el, { renderer: "svg", viewId });
  cleanups.push(cleanup);
  const root = el.querySelector<HTMLElement>("div.calwatch-widget");
  if (root === null) throw new Error("no root");
  return { el, root, cleanup };
}
function newModel() {
  return new FakeModel({
    _specs: { coverage: batchesSpec, sizes: setSizesSpec },
    _chart_order: ["coverage", "sizes"],
    _calibrators: ["aps", "lac"],
  });
}
async function appliedSeq(root: HTMLElement, seq: number) {
  await vi.waitFor(() => expect(root.dataset.appliedSeq).toBe(String(seq)), { timeout: 5000 });
}
/** Every value written to data-applied-seq from now on (a write of the same value included). */
function watchAppliedSeq(root: HTMLElement): string[] {
  const log: string[] = [];
  new MutationObserver((records) => {
    for (const r of records) log.push((r.target as HTMLElement).getAttribute("data-applied-seq") ?? "");
  }).observe(root, { attributes: true, attributeFilter: ["data-applied-seq"] });
  return log;
}
function timings(): number[] {
  return (globalThis as { __calwatchTimings?: number[] }).__calwatchTimings ?? [];
}
/** Marks drawn for the rows of one chart (one point / bar per row). */
function marks(root: HTMLElement, chart: string, type: "symbol" | "rect"): number {
  return root.querySelectorAll(`[data-chart="${chart}"] g.mark-${type} path`).length;
}

afterEach(() => {
  for (const c of cleanups.splice(0)) c();
  document.body.replaceChildren();
  document.getElementById("calwatch-widget-style")?.remove();
});

describe("renderView", () => {
  it("builds the root, one chart per _chart_order entry, styles, and asks for a replay", () => {
    const model = newModel();
    const { root } = mount(model, "abc");
    expect(root.dataset.viewId).toBe("abc");
    expect([...root.querySelectorAll<HTMLElement>("div.calwatch-chart")].map((e) => e.dataset.chart)).toEqual([
      "coverage",
      "sizes",
    ]);
    expect(model.sent).toEqual([{ kind: "replay-request", view: "abc" }]);
    expect(document.getElementById("calwatch-widget-style")?.textContent).toContain(".calwatch-widget");
  });

  it("gives each view its own random id", () => {
    const model = newModel();
    const a = renderView(model, document.body.appendChild(document.createElement("div")));
    const c = renderView(model, document.body.appendChild(document.createElement("div")));
    cleanups.push(a, c);
    const ids = model.sent.map((m) => (m as { view: string }).view);
    expect(ids).toHaveLength(2);
    expect(ids[0]).toMatch(/^[0-9a-f]{16}$/);
    expect(ids[0]).not.toBe(ids[1]);
  });

  it("shows upserts at once before its replay; the replay resets, then later upserts apply again", async () => {
    const model = newModel();
    const { root } = mount(model);
    const log = watchAppliedSeq(root);
    model.receive({ kind: "upsert", seq: 3, data: { batches: [b(2, "aps", null), b(9, "zzz", 0.5)] } });
    await appliedSeq(root, 3);
    expect(root.getAttribute("data-rows-batches")).toBe("2");
    expect(root.dataset.replaySeq).toBeUndefined();
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(1)); // b(9) is labelled
    model.receive({ kind: "upsert", seq: 4, data: { batches: [b(0, "aps", 0.9)], set_sizes: [{ key: "0|aps|1", size: 1, count: 5 }] } });
    await appliedSeq(root, 4);
    expect(root.getAttribute("data-rows-batches")).toBe("3");
    expect(root.getAttribute("data-rows-set_sizes")).toBe("1");
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
    expect(marks(root, "sizes", "rect")).toBe(1);

    model.receive({ kind: "replay", view: "someone-else", seq: 9, data: { batches: [b(7, "x", 1)] } });
    // The replay (state as of seq 3) lacks the row "9|zzz" (gone from the kernel): the reset
    // drops it; upsert 4 is applied again on top.
    model.receive({
      kind: "replay",
      view: "v1",
      seq: 3,
      data: { batches: [b(0, "aps", null), b(1, "aps", null), b(2, "aps", null)], set_sizes: [] },
    });
    await vi.waitFor(() => expect(root.dataset.replaySeq).toBe("3"));
    expect(root.dataset.appliedSeq).toBe("4");
    expect(root.getAttribute("data-rows-batches")).toBe("3");
    expect(root.getAttribute("data-rows-set_sizes")).toBe("1");
    // Only labelled rows (coverage not null) are drawn: batch 0 from upsert 4.
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(1));
    expect(marks(root, "sizes", "rect")).toBe(1);

    // Late labels replace rows by key: same row count, now all drawn.
    model.receive({ kind: "upsert", seq: 5, data: { batches: [b(1, "aps", 0.8), b(2, "aps", 0.7)] } });
    await appliedSeq(root, 5);
    expect(root.getAttribute("data-rows-batches")).toBe("3");
    expect(marks(root, "coverage", "symbol")).toBe(3);
    expect(root.querySelector(".calwatch-error")?.textContent).toBe("");
    // data-applied-seq was written once per new seq, never back, never twice the same
    expect(log).toEqual(["3", "4", "5"]);
  });

  it("merges a burst of upserts received in one go into one changeset", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [] } });
    await appliedSeq(root, 0);
    const log = watchAppliedSeq(root);
    const before = timings().length;
    for (let seq = 1; seq <= 20; seq++) {
      // a late label for the previous batch plus the new batch, as the kernel sends them
      const rows = seq > 1 ? [b(seq - 2, "aps", 0.9), b(seq - 1, "aps", null)] : [b(0, "aps", null)];
      model.receive({ kind: "upsert", seq, data: { batches: rows } });
    }
    await appliedSeq(root, 20);
    expect(root.getAttribute("data-rows-batches")).toBe("20");
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(19));
    // one changeset of the coverage chart; the sizes chart reads no dataset that changed
    expect(timings().length - before).toBe(1);
    expect(log).toEqual(["20"]);
  });

  it("merges upserts that arrive while an apply is in flight into the next one", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [] } });
    await appliedSeq(root, 0);
    // Hold the charts' next apply until released (as a slow render would).
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const original = Chart.prototype.apply;
    const spy = vi.spyOn(Chart.prototype, "apply").mockImplementation(async function (this: Chart, update) {
      await gate;
      return original.call(this, update);
    });
    try {
      const log = watchAppliedSeq(root);
      const before = timings().length;
      model.receive({ kind: "upsert", seq: 1, data: { batches: [b(0, "aps", null)] } });
      // The first apply starts once the page's idle gap after the replay's apply has passed (as
      // long as that apply took: a few ms on a busy machine), and then waits at the gate.
      await vi.waitFor(() => expect(spy).toHaveBeenCalledTimes(2)); // both charts at once
      for (let seq = 2; seq <= 20; seq++) {
        model.receive({ kind: "upsert", seq, data: { batches: [b(seq - 2, "aps", 0.9), b(seq - 1, "aps", null)] } });
        await new Promise((r) => setTimeout(r, 0)); // each in a task of its own
      }
      expect(spy).toHaveBeenCalledTimes(2);
      expect(root.dataset.appliedSeq).toBe("0");
      release();
      await appliedSeq(root, 20);
      expect(root.getAttribute("data-rows-batches")).toBe("20");
      await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(19));
      expect(spy).toHaveBeenCalledTimes(4); // 1, then 2..20 merged; to each chart
      expect(timings().length - before).toBe(2); // the coverage chart's two changesets
      expect(log).toEqual(["1", "20"]);
    } finally {
      spy.mockRestore();
    }
  });

  it("leaves the page idle after an apply of a fast stream for as long as the apply took", async () => {
    expect(idleGapMs(0)).toBe(0);
    expect(idleGapMs(120)).toBe(120);
    expect(idleGapMs(10_000)).toBe(MAX_IDLE_GAP_MS);
    expect(idleGapMs(Number.NaN)).toBe(0);
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [] } });
    await appliedSeq(root, 0);
    const DRAW_MS = 60; // a slow render
    const starts: number[] = [];
    const ends: number[] = [];
    const original = Chart.prototype.apply;
    const spy = vi.spyOn(Chart.prototype, "apply").mockImplementation(async function (this: Chart, update) {
      starts.push(performance.now());
      await new Promise((r) => setTimeout(r, DRAW_MS));
      await original.call(this, update);
      ends.push(performance.now());
    });
    try {
      model.receive({ kind: "upsert", seq: 1, data: { batches: [b(0, "aps", null)] } });
      await vi.waitFor(() => expect(starts.length).toBe(2)); // both charts: the first apply is drawing
      model.receive({ kind: "upsert", seq: 2, data: { batches: [b(0, "aps", 0.9), b(1, "aps", null)] } });
      await appliedSeq(root, 2);
      expect(starts.length).toBe(4); // two applies, each to both charts
      const firstEnd = Math.max(ends[0] ?? 0, ends[1] ?? 0);
      const firstTook = firstEnd - Math.min(starts[0] ?? 0, starts[1] ?? 0);
      // the second apply began no sooner than the first took (2 ms: timer rounding)
      expect((starts[2] ?? 0) - firstEnd).toBeGreaterThanOrEqual(Math.min(firstTook, MAX_IDLE_GAP_MS) - 2);
    } finally {
      spy.mockRestore();
    }
  });

  it("merges a replay into the waiting updates: reset, later rows on top", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "upsert", seq: 1, data: { batches: [b(0, "old", 0.1)] } }); // in flight
    model.receive({ kind: "upsert", seq: 2, data: { batches: [b(1, "aps", 0.5)] } });
    model.receive({ kind: "replay", view: "v1", seq: 1, data: { batches: [b(0, "aps", 0.9)], set_sizes: [] } });
    model.receive({ kind: "upsert", seq: 3, data: { batches: [b(1, "aps", 0.6)] } });
    await vi.waitFor(() => expect(root.dataset.replaySeq).toBe("1"));
    await appliedSeq(root, 3);
    expect(root.getAttribute("data-rows-batches")).toBe("2");
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
  });

  it("records a timing per chart update in globalThis.__calwatchTimings", async () => {
    const model = newModel();
    const { root } = mount(model);
    const before = (globalThis as { __calwatchTimings?: number[] }).__calwatchTimings?.length ?? 0;
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [b(0, "aps", 0.9)] } });
    await appliedSeq(root, 0);
    const timings = (globalThis as { __calwatchTimings?: number[] }).__calwatchTimings ?? [];
    // A replay resets both charts: two changesets.
    expect(timings.length - before).toBe(2);
    expect(timings.every((t) => typeof t === "number" && t >= 0)).toBe(true);
  });

  it("records each upsert's way from the kernel to the screen in globalThis.__calwatchLatencies", async () => {
    const model = newModel();
    const { root } = mount(model);
    const sink = latencySink();
    sink.length = 0;
    const t0 = epochNow() - 5; // the kernel began 5 ms ago
    model.receive({ kind: "upsert", seq: 1, t0, data: { batches: [b(0, "aps", 0.9)] } });
    model.receive({ kind: "upsert", seq: 2, t0: t0 + 1, data: { batches: [b(1, "aps", 0.8)] } });
    model.receive({ kind: "upsert", seq: 3, data: { batches: [b(2, "aps", 0.7)] } }); // no t0: not measured
    await appliedSeq(root, 3);
    await vi.waitFor(() => expect(sink.map((s) => s.seq)).toEqual([1, 2]));
    for (const sample of sink) {
      expect(sample.applied_ms).toBeGreaterThanOrEqual(4);
      expect(sample.frame_ms).toBeGreaterThanOrEqual(sample.applied_ms);
    }
  });

  it("queues while paused and applies everything on resume", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [] } });
    await appliedSeq(root, 0);
    root.querySelector<HTMLButtonElement>("button.calwatch-pause")?.click();
    expect(model.get("_paused")).toBe(true);
    model.receive({ kind: "upsert", seq: 1, data: { batches: [b(0, "aps", 0.9)] } });
    model.receive({ kind: "upsert", seq: 2, data: { batches: [b(1, "aps", 0.9)] } });
    await new Promise((r) => setTimeout(r, 50));
    expect(root.dataset.appliedSeq).toBe("0");
    expect(root.querySelector(".calwatch-pending")?.textContent).toContain("2 updates queued");
    const before = timings().length;
    model.set("_paused", false); // the kernel may resume too
    await appliedSeq(root, 2);
    expect(timings().length - before).toBe(1); // both upserts in one changeset (coverage chart)
    expect(root.getAttribute("data-rows-batches")).toBe("2");
    expect(root.querySelector(".calwatch-pending")?.textContent).toBe("");
  });

  it("rebuilds the charts when specs or order change, keeping the data", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [b(0, "aps", 0.9), b(1, "aps", 0.8)] } });
    await appliedSeq(root, 0);
    model.set("_chart_order", ["coverage"]);
    model.set("_specs", { coverage: { ...batchesSpec, height: 80 } });
    await Promise.resolve();
    expect([...root.querySelectorAll<HTMLElement>("div.calwatch-chart")].map((e) => e.dataset.chart)).toEqual([
      "coverage",
    ]);
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
  });

  it("sets the calibrator signal when the picker changes", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [b(0, "aps", 0.9), b(0, "lac", 0.8)] } });
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
    const select = root.querySelector<HTMLSelectElement>("select");
    if (select === null) throw new Error("no select");
    select.value = "lac";
    select.dispatchEvent(new Event("change"));
    expect(model.get("_selected")).toBe("lac");
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(1));
    model.set("_selected", "");
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
  });

  it("draws protocol errors and missing specs into the widget", () => {
    const model = newModel();
    model.set("_chart_order", ["coverage", "nope"]);
    const { root } = mount(model);
    expect(root.querySelector(".calwatch-error")?.textContent).toContain("nope");
    model.receive({ kind: "upsert", seq: 1, data: { batches: [{ id: 1 }] } });
    expect(root.querySelector(".calwatch-error")?.textContent).toContain('string "key"');
  });

  it("shows a chart whose spec fails to embed, and clears it when the spec is replaced", async () => {
    const model = newModel();
    model.set("_specs", { coverage: { mark: "no-such-mark", data: { name: "batches" } }, sizes: setSizesSpec });
    const { root } = mount(model);
    const box = () => root.querySelector(".calwatch-error")?.textContent ?? "";
    await vi.waitFor(() => expect(box()).toMatch(/^Chart "coverage": \w*Error/));
    model.set("_specs", { coverage: batchesSpec, sizes: setSizesSpec });
    await Promise.resolve();
    expect(box()).toBe("");
  });

  it("puts the health strip and the shift warnings under the header, and their protocol errors in the error box", () => {
    const model = newModel(); // no _warnings: a kernel without warnings
    const { root } = mount(model);
    const alerts = root.querySelector<HTMLElement>(".calwatch-alerts");
    expect([...root.children].map((c) => c.className)).toEqual([
      "calwatch-controls",
      "calwatch-health",
      "calwatch-alerts",
      "calwatch-dash-controls",
      "calwatch-timeline",
      "calwatch-rows",
      "calwatch-notes",
      "calwatch-tabs",
      "calwatch-charts",
    ]);
    expect(alerts?.hidden).toBe(true);
    const w = {
      episode: 4,
      name: "coverage-drop",
      threatens: "coverage",
      explanation: "Coverage fell.",
      action: "recalibrate",
      statistic: 25,
      threshold: 20,
      false_alarm_control: "5%",
      first_batch: 12,
      last_batch: 12,
      open: true,
      acknowledged: false,
      ack_note: "",
      ack_by: "",
      ack_at: "",
    };
    model.set("_warnings", [w]);
    expect(alerts?.hidden).toBe(false);
    root.querySelector<HTMLButtonElement>('div.calwatch-warning[data-episode="4"] button.calwatch-ack')?.click();
    root.querySelector<HTMLButtonElement>('div.calwatch-warning[data-episode="4"] button.calwatch-ack-ok')?.click();
    expect(model.sent[model.sent.length - 1]).toStrictEqual({ kind: "acknowledge", episode: 4, note: "" });
    const box = () => root.querySelector(".calwatch-error")?.textContent ?? "";
    model.set("_warnings", [w, { episode: 4 } as unknown as typeof w]);
    expect(box()).toBe("_warnings[1] repeats episode 4");
    model.set("_warnings", [w]);
    expect(box()).toBe("");
  });

  it("cleans up: listeners off, DOM removed", () => {
    const model = newModel();
    const { el, cleanup } = mount(model);
    cleanup();
    for (const event of [
      "msg:custom",
      "change:_paused",
      "change:_selected",
      "change:_specs",
      "change:_title",
      "change:_warnings",
    ]) {
      expect(model.listenerCount(event)).toBe(0);
    }
    expect(el.querySelector(".calwatch-widget")).toBeNull();
  });
});

// Shaped like calwatch.views.dashboard.timeline_spec(): rows per batch with the `brush` selection.
const timelineSpec: VegaLiteSpec = {
  params: [{ name: "brush", select: { type: "interval", encodings: ["x"] }, views: ["area"] }],
  layer: [
    {
      name: "area",
      data: { name: "batches" },
      mark: { type: "area", interpolate: "step-after" },
      encoding: {
        x: { field: "batch", type: "quantitative", scale: { nice: false } },
        y: { field: "coverage", type: "quantitative" },
      },
    },
  ],
  height: 48,
};

describe("JupyterLab theme", () => {
  const labelFills = (root: HTMLElement) =>
    new Set([...root.querySelectorAll('[data-chart="coverage"] g.role-axis-label text')].map((t) => t.getAttribute("fill")));
  const background = (root: HTMLElement) => root.querySelector<SVGElement>('[data-chart="coverage"] svg')?.style.backgroundColor ?? "";

  it("re-themes the charts, keeping their data, when the theme switches while shown", async () => {
    const model = newModel();
    const { root } = mount(model);
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { batches: [b(0, "aps", 0.9), b(1, "aps", 0.8)] } });
    await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
    expect(labelFills(root)).toEqual(new Set(["#000"]));
    expect(background(root)).toBe("white");
    document.body.dataset.jpThemeLight = "false"; // what JupyterLab's theme manager sets
    try {
      // Vega's dark theme (light text) on the notebook's own background
      await vi.waitFor(() => expect(labelFills(root)).toEqual(new Set(["#fff"])));
      expect(background(root)).toBe("transparent");
      await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
      document.body.dataset.jpThemeLight = "true";
      await vi.waitFor(() => expect(labelFills(root)).toEqual(new Set(["#000"])));
      await vi.waitFor(() => expect(marks(root, "coverage", "symbol")).toBe(2));
    } finally {
      delete document.body.dataset.jpThemeLight;
    }
  });
});

describe("the timeline brush across views", () => {
  /** Every Chart that applied an update, to find a view's timeline (charts are internal). */
  function trackCharts(): Set<Chart> {
    const seen = new Set<Chart>();
    const original = Chart.prototype.apply;
    const spy = vi.spyOn(Chart.prototype, "apply").mockImplementation(function (this: Chart, update) {
      seen.add(this);
      return original.call(this, update);
    });
    cleanups.push(() => spy.mockRestore());
    return seen;
  }
  function timelineOf(seen: Set<Chart>, root: HTMLElement): Chart {
    const target = root.querySelector(".calwatch-timeline .calwatch-vega");
    const chart = [...seen].reverse().find((c) => c.el === target); // the latest (rebuilds reuse el)
    if (chart === undefined) throw new Error("no timeline chart");
    return chart;
  }
  function model2() {
    const model = newModel();
    model.set("_specs", { coverage: batchesSpec, sizes: setSizesSpec, timeline: timelineSpec });
    model.set("_batch_range", []);
    return model;
  }
  const data = { batches: Array.from({ length: 11 }, (_, i) => b(i, "aps", 0.9)) };
  const brushOf = (root: HTMLElement) => root.querySelector<HTMLElement>(".calwatch-timeline .calwatch-vega")?.dataset.brush;

  it("draws a range brushed in one view, or set by the kernel, in the other; clears both; never writes it back", async () => {
    const seen = trackCharts();
    const model = model2();
    const a = mount(model, "va").root;
    const c = mount(model, "vb").root;
    model.receive({ kind: "replay", view: "va", seq: 0, data });
    model.receive({ kind: "replay", view: "vb", seq: 0, data });
    await appliedSeq(a, 0);
    await appliedSeq(c, 0);
    const ta = timelineOf(seen, a);
    const tb = timelineOf(seen, c);
    await Promise.all([ta.resize(400), tb.resize(230)]); // different widths, as inline vs sidebar
    const view = ta.view;
    if (view === null) throw new Error("not embedded");
    const x = view.scale("x") as (v: number) => number;

    // a drag in view A (the pixel signal of the selection): A's filters at once, the model later
    view.signal("brush_x", [x(2.2), x(5.7)]);
    await view.runAsync();
    expect(brushOf(a)).toBe("3-5");
    await vi.waitFor(() => expect(model.get("_batch_range")).toEqual([3, 5]), { timeout: 2000 });
    expect(model.saves).toBe(1);
    // view B draws the same batches (it hears the model's change event)
    await vi.waitFor(() => expect(brushOf(c)).toBe("3-5"));
    expect(c.dataset.batchRange).toBe("3-5");
    expect(view.signal("brush_x")).toEqual([x(2.2), x(5.7)]); // A keeps the user's rectangle

    // the kernel (Python's widget.batch_range = (7, 9)): both views draw it
    model.set("_batch_range", [7, 9]);
    await vi.waitFor(() => expect([brushOf(a), brushOf(c)]).toEqual(["7-9", "7-9"]));
    // the clear button
    c.querySelector<HTMLButtonElement>("button.calwatch-range-clear")?.click();
    await vi.waitFor(() => expect([brushOf(a), brushOf(c)]).toEqual(["", ""]));
    expect(model.get("_batch_range")).toEqual([]);
    await new Promise((r) => setTimeout(r, 300)); // past the brush's debounce
    expect(model.saves).toBe(2); // the drag and the clear button, nothing echoed back
    expect(model.get("_batch_range")).toEqual([]);
  });

  it("draws the range in force on a view opened later, once it has data, and after a theme rebuild", async () => {
    const seen = trackCharts();
    const model = model2();
    model.set("_batch_range", [4, 4]);
    const { root } = mount(model, "vc");
    model.receive({ kind: "replay", view: "vc", seq: 0, data });
    await appliedSeq(root, 0);
    await timelineOf(seen, root).resize(300);
    await vi.waitFor(() => expect(brushOf(root)).toBe("4-4"));
    document.body.dataset.jpThemeLight = "false";
    try {
      await vi.waitFor(() => expect(brushOf(root)).toBe("")); // a new timeline, not yet wide
      const rebuilt = timelineOf(seen, root);
      await rebuilt.resize(300);
      await vi.waitFor(() => expect(brushOf(root)).toBe("4-4"));
      expect(model.saves).toBe(0);
    } finally {
      delete document.body.dataset.jpThemeLight;
    }
  });
});

describe("default export", () => {
  it("is an anywidget factory with initialize and render", async () => {
    const def = widget();
    expect(typeof def.initialize).toBe("function");
    expect(typeof def.render).toBe("function");
    const model = newModel();
    const el = document.body.appendChild(document.createElement("div"));
    const props = { model, el } as unknown as Parameters<typeof def.render>[0];
    const cleanup = await def.render(props);
    expect(el.querySelector(".calwatch-widget")).not.toBeNull();
    expect(typeof cleanup).toBe("function");
    if (typeof cleanup === "function") await cleanup();
    expect(el.querySelector(".calwatch-widget")).toBeNull();
  });
});

describe("namedBatches", () => {
  it("names batches observed under a name, by index; null when none has a name", () => {
    const row = (batch: number, name: string, extra: Record<string, unknown> = {}) => ({
      key: `${batch}|lac`, batch, name, calibrator: "lac", ...extra,
    });
    expect(namedBatches([row(0, "0"), row(1, "1")])).toBeNull();
    expect(namedBatches([row(0, "0"), row(2, "2013-07"), row(1, "1"), { ...row(2, "2013-07"), key: "2|aps" }])).toEqual([
      null,
      null,
      "2013-07",
    ]);
    // a pooled bucket of several batches is not one batch's name
    expect(namedBatches([row(4, "4–7", { n_batches: 4 })])).toBeNull();
  });
});
