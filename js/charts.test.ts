import { afterEach, describe, expect, it } from "vitest";
import {
  brushPixels,
  brushRange,
  Chart,
  calibratorSignalValue,
  datasetNames,
  fitTextToWidth,
  LEGEND_COLUMNS,
  prepareSpec,
  unclipBrushes,
  type XScale,
} from "./charts";
import type { KeyedRow, VegaLiteSpec } from "./model";
import { RowStore } from "./stream";

// Shaped like calwatch.views.charts' Altair output: layered, data by name, top-level param.
const batchesSpec: VegaLiteSpec = {
  $schema: "https://vega.github.io/schema/vega-lite/v6.json",
  params: [{ name: "calibrator", value: "(all)" }],
  data: { name: "batches" },
  transform: [{ filter: "calibrator == '(all)' || datum.calibrator == calibrator" }],
  layer: [
    { mark: "line", encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" }, color: { field: "calibrator", type: "nominal" } } },
    { mark: "point", encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" } } },
  ],
  width: "container",
  height: 160,
};

const setSizesSpec: VegaLiteSpec = {
  data: { name: "set_sizes" },
  mark: "bar",
  encoding: { x: { field: "size", type: "ordinal" }, y: { aggregate: "sum", field: "count", type: "quantitative" } },
  height: 120,
};

function batchRow(batch: number, calibrator: string, coverage: number | null): KeyedRow {
  return { key: `${batch}|${calibrator}`, batch, calibrator, coverage };
}

const charts: Chart[] = [];
function makeChart(spec: VegaLiteSpec, calibrator = "", timings: number[] = []): Chart {
  const el = document.createElement("div");
  document.body.append(el);
  const errors: unknown[] = [];
  const chart = new Chart(el, spec, { renderer: "svg", calibrator, timings, onError: (e) => errors.push(e) });
  (chart as unknown as { errors: unknown[] }).errors = errors;
  charts.push(chart);
  return chart;
}
function errorsOf(chart: Chart): unknown[] {
  return (chart as unknown as { errors: unknown[] }).errors;
}
function data(chart: Chart, name: string): KeyedRow[] {
  const view = chart.view;
  if (view === null) throw new Error("not embedded");
  return view.data(name) as KeyedRow[];
}

afterEach(() => {
  for (const chart of charts.splice(0)) chart.finalize();
  document.body.replaceChildren();
});

describe("datasetNames", () => {
  it("finds named data at the top and inside layer / concat children", () => {
    expect(datasetNames(batchesSpec)).toEqual(new Set(["batches"]));
    const nested = {
      vconcat: [
        { layer: [{ data: { name: "batches" }, mark: "line" }] },
        { hconcat: [{ data: { name: "class_coverage" }, mark: "bar" }, { data: { values: [] }, mark: "bar" }] },
      ],
    };
    expect(datasetNames(nested)).toEqual(new Set(["batches", "class_coverage"]));
  });
  it("leaves out the datasets a spec carries itself (a reliability diagonal): a reset must not empty them", () => {
    const reliability = {
      datasets: { "data-diagonal": [{ a: 0, b: 1 }] },
      layer: [
        { data: { name: "data-diagonal" }, mark: "rule" },
        { data: { name: "reliability" }, mark: "line" },
      ],
    };
    expect(datasetNames(reliability)).toEqual(new Set(["reliability"]));
  });
});

describe("unclipBrushes", () => {
  it("drops clipping from interval-selection rectangles only, at any depth", () => {
    const spec = {
      marks: [
        { name: "brush_brush_bg", type: "rect", clip: true },
        { name: "layer_0_marks", type: "rect", clip: true },
        { name: "g", type: "group", marks: [{ name: "zoom_brush", type: "rect", clip: true }] },
        { name: "brush_brush", type: "rect", clip: true },
        { name: "label_brush", type: "text", clip: true },
      ],
    };
    const out = unclipBrushes(spec);
    expect(out).toBe(spec); // patched in place, as vega-embed expects of a patch function
    expect(spec.marks.map((m) => "clip" in m)).toEqual([false, true, false, false, true]);
    expect("clip" in (spec.marks[2] as { marks: object[] }).marks[0]!).toBe(false);
    expect(unclipBrushes(null)).toBeNull();
  });
});

describe("prepareSpec", () => {
  it("adds container width and resizable fit-x autosize without mutating the input", () => {
    const prepared = prepareSpec(setSizesSpec);
    expect(prepared.width).toBe("container");
    expect(prepared.autosize).toEqual({ type: "fit-x", contains: "padding", resize: true });
    expect(setSizesSpec.width).toBeUndefined();
    expect(setSizesSpec.autosize).toBeUndefined();
  });

  it("keeps explicit autosize types and widths, and leaves concat widths alone", () => {
    expect(prepareSpec({ ...setSizesSpec, autosize: "pad", width: 200 })).toMatchObject({
      autosize: { type: "pad", resize: true },
      width: 200,
    });
    const concat = prepareSpec({ hconcat: [setSizesSpec] });
    expect(concat.width).toBeUndefined();
    expect(concat.autosize).toEqual({ type: "pad", resize: true });
  });
});

describe("prepareSpec with params inside layer children", () => {
  const layered: VegaLiteSpec = {
    data: { name: "batches" },
    layer: [
      {
        params: [
          { name: "calibrator", value: "(all)" },
          { name: "brush", select: "interval" },
        ],
        transform: [{ filter: "calibrator == '(all)' || datum.calibrator == calibrator" }],
        mark: "line",
        encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" } },
      },
      { params: [{ name: "calibrator", value: "ignored" }], mark: "point", encoding: { x: { field: "batch", type: "quantitative" } } },
    ],
  };

  it("hoists variable params to the top level and leaves selections in place", () => {
    const prepared = prepareSpec(layered);
    expect(prepared.params).toEqual([{ name: "calibrator", value: "(all)" }]);
    const layer = prepared.layer as Record<string, unknown>[];
    expect(layer[0]?.params).toEqual([{ name: "brush", select: "interval" }]);
    expect(layer[1]?.params).toBeUndefined();
    expect((layered.layer as Record<string, unknown>[])[0]?.params).toHaveLength(2); // input intact
  });

  it("embeds such a spec and drives its filter with the calibrator signal", async () => {
    const spec = { ...layered, layer: (layered.layer as Record<string, unknown>[]).slice(0, 1).map((l) => ({ ...l, params: [{ name: "calibrator", value: "(all)" }] })) };
    const chart = makeChart(spec, "aps");
    await chart.apply(
      new RowStore().apply({ kind: "reset", seq: 0, data: { batches: [batchRow(0, "aps", 0.9), batchRow(0, "lac", 0.8)] } }),
    );
    expect(errorsOf(chart)).toEqual([]);
    expect(chart.view?.signal("calibrator")).toBe("aps");
    expect(data(chart, "batches")).toHaveLength(2);
  });
});

describe("Chart", () => {
  it("embeds, queues updates until embedded, and upserts rows by key", async () => {
    const timings: number[] = [];
    const chart = makeChart(batchesSpec, "", timings);
    const store = new RowStore();
    // Applied before the embed finished: must be queued, not lost.
    const first = chart.apply(
      store.apply({ kind: "reset", seq: 0, data: { batches: [batchRow(0, "aps", null), batchRow(0, "lac", null)] } }),
    );
    expect(chart.view).toBeNull();
    await first;
    expect(chart.view).not.toBeNull();
    expect(data(chart, "batches")).toHaveLength(2);

    // Late labels for batch 0 plus a new batch, with a key repeated inside the message.
    await chart.apply(
      store.apply({
        kind: "upsert",
        seq: 1,
        data: {
          batches: [batchRow(0, "aps", 0.5), batchRow(1, "aps", null), batchRow(0, "aps", 0.9), batchRow(0, "lac", 0.8)],
        },
      }),
    );
    const rows = data(chart, "batches");
    expect(rows).toHaveLength(3);
    expect(new Set(rows.map((r) => r.key)).size).toBe(3);
    expect(rows.find((r) => r.key === "0|aps")?.coverage).toBe(0.9);
    expect(rows.find((r) => r.key === "0|lac")?.coverage).toBe(0.8);
    expect(timings).toHaveLength(2);
    expect(timings.every((t) => t >= 0)).toBe(true);
    expect(errorsOf(chart)).toEqual([]);
    // The layered marks drew something.
    expect(chart.el.querySelectorAll("svg").length).toBeGreaterThan(0);
  });

  it("resets on a replay and skips datasets the spec does not read", async () => {
    const timings: number[] = [];
    const chart = makeChart(setSizesSpec, "", timings);
    const store = new RowStore();
    await chart.apply(store.apply({ kind: "upsert", seq: 1, data: { set_sizes: [{ key: "a", size: 1, count: 2 }] } }));
    expect(data(chart, "set_sizes")).toHaveLength(1);
    // Only a dataset this chart does not use: no change, no error, no timing.
    await chart.apply(store.apply({ kind: "upsert", seq: 2, data: { batches: [batchRow(0, "aps", 0.9)] } }));
    expect(timings).toHaveLength(1);
    await chart.apply(
      store.apply({
        kind: "reset",
        seq: 3,
        data: { set_sizes: [{ key: "b", size: 2, count: 1 }, { key: "c", size: 3, count: 1 }] },
      }),
    );
    expect(data(chart, "set_sizes").map((r) => r.key).sort()).toEqual(["b", "c"]);
    expect(errorsOf(chart)).toEqual([]);
  });

  it("sets the calibrator signal, filtering the derived data", async () => {
    const chart = makeChart(batchesSpec, "lac");
    const store = new RowStore();
    await chart.apply(
      store.apply({ kind: "reset", seq: 0, data: { batches: [batchRow(0, "aps", 0.9), batchRow(0, "lac", 0.8)] } }),
    );
    const view = chart.view;
    if (view === null) throw new Error("not embedded");
    expect(view.signal("calibrator")).toBe("lac");
    // The filter transform runs on the derived dataset data_0 of the compiled spec.
    expect((view.data("data_0") as KeyedRow[]).map((r) => r.calibrator)).toEqual(["lac"]);
    await chart.setCalibrator("");
    expect(view.signal("calibrator")).toBe(calibratorSignalValue(""));
    expect(view.data("data_0")).toHaveLength(2);
    expect(errorsOf(chart)).toEqual([]);
  });

  it("skips the calibrator signal when the spec has none at the top level", async () => {
    const chart = makeChart(setSizesSpec);
    await chart.setCalibrator("aps");
    expect(chart.view).not.toBeNull();
    expect(errorsOf(chart)).toEqual([]);
  });

  it("follows the container width", async () => {
    const chart = makeChart(setSizesSpec);
    const svgWidth = () => Number(chart.el.querySelector("svg")?.getAttribute("width"));
    await chart.resize(321);
    // fit-x: the whole chart (axes included) is 321 px, the plot region narrower.
    expect(svgWidth()).toBe(321);
    const inner = chart.view?.width() ?? 0;
    expect(inner).toBeGreaterThan(200);
    expect(inner).toBeLessThan(321);
    await chart.resize(0); // hidden: keep the last width
    expect(svgWidth()).toBe(321);
    await chart.resize(250);
    expect(svgWidth()).toBe(250);
  });

  it("reports an invalid spec instead of throwing, and ignores later updates", async () => {
    const chart = makeChart({ mark: "no-such-mark", data: { name: "batches" } });
    await chart.apply(new RowStore().apply({ kind: "upsert", seq: 1, data: { batches: [batchRow(0, "a", 1)] } }));
    expect(chart.view).toBeNull();
    expect(errorsOf(chart)).toHaveLength(1);
  });

  it("does nothing after finalize", async () => {
    const chart = makeChart(setSizesSpec);
    await chart.settled();
    chart.finalize();
    await chart.apply(new RowStore().apply({ kind: "upsert", seq: 1, data: { set_sizes: [{ key: "a" }] } }));
    expect(chart.view).toBeNull();
    expect(errorsOf(chart)).toEqual([]);
  });
});

// Shaped like calwatch.views.dashboard.timeline_spec(): a layered area + line of rows per batch, the
// `brush` interval selection (x) on the area layer.
const timelineSpec: VegaLiteSpec = {
  params: [{ name: "brush", select: { type: "interval", encodings: ["x"] }, views: ["timeline_area"] }],
  layer: [
    {
      name: "timeline_area",
      data: { name: "batches" },
      mark: { type: "area", interpolate: "step-after" },
      encoding: {
        x: { field: "batch", type: "quantitative", scale: { nice: false } },
        y: { field: "n_rows", type: "quantitative" },
      },
    },
    {
      data: { name: "batches" },
      mark: { type: "line", interpolate: "step-after" },
      encoding: { x: { field: "batch", type: "quantitative", scale: { nice: false } }, y: { field: "n_rows", type: "quantitative" } },
    },
  ],
  height: 48,
};

function batches(first: number, last: number): KeyedRow[] {
  const rows: KeyedRow[] = [];
  for (let b = first; b <= last; b++) rows.push({ key: String(b), batch: b, n_rows: 100 });
  return rows;
}

describe("brushPixels", () => {
  // x = 10 * batch + 5 px, like a linear Vega scale of domain [0, 10] onto [5, 105]
  const linear = (domain: unknown[]): XScale => Object.assign((v: number) => 10 * v + 5, { domain: () => domain });

  it("covers whole batches with half a batch each side, also a single batch", () => {
    expect(brushPixels(linear([0, 10]), [3, 6])).toEqual([30, 70]);
    expect(brushPixels(linear([0, 10]), [6, 3])).toEqual([30, 70]);
    expect(brushPixels(linear([0, 10]), [4, 4])).toEqual([40, 50]);
    // an end outside the domain is placed all the same (the rectangle is clipped to the plot)
    expect(brushPixels(linear([0, 10]), [0, 10])).toEqual([0, 110]);
  });

  it("inverts back to the same batches despite float error", () => {
    const x = (v: number) => (v * 7) / 3 + 0.1;
    const invert = (px: number) => ((px - 0.1) * 3) / 7;
    for (let lo = 0; lo < 30; lo++) {
      for (const hi of [lo, lo + 1, lo + 17]) {
        const px = brushPixels(Object.assign(x, { domain: () => [0, 50] }), [lo, hi]);
        if (px === null) throw new Error("not placed");
        expect(brushRange({ batch: px.map(invert) })).toEqual([lo, hi]);
      }
    }
  });

  it("waits for a domain: none without data", () => {
    expect(brushPixels(linear([]), [3, 6])).toBeNull();
    expect(brushPixels(linear([Number.NaN, Number.NaN]), [3, 6])).toBeNull();
    expect(brushPixels(linear([2, 2]), [2, 2])).toBeNull();
    expect(brushPixels((v: number) => v, [3, 6])).toBeNull();
  });
});

describe("Chart.setBrush", () => {
  function timeline(onBrush: (r: [number, number] | null) => void, width = 400): Chart {
    const el = document.createElement("div");
    document.body.append(el);
    const chart = new Chart(el, timelineSpec, { renderer: "svg", timings: [], onBrush, onError: (e) => errors.push(e) });
    charts.push(chart);
    if (width > 0) void chart.resize(width); // happy-dom lays nothing out: no container width
    return chart;
  }
  const errors: unknown[] = [];
  afterEach(() => {
    errors.splice(0);
  });
  function viewOf(chart: Chart) {
    const view = chart.view;
    if (view === null) throw new Error("not embedded");
    return view;
  }
  /** The brush rectangle's pixel extent [x, x + width] as drawn, null when none is drawn. */
  function drawnRect(chart: Chart): [number, number] | null {
    type Item = { name?: string; items?: { x: number; width: number }[] };
    const root = (viewOf(chart).scenegraph() as unknown as { root: { items: { items?: Item[] }[] } }).root;
    const mark = (root.items[0]?.items ?? []).find((m) => m.name === "brush_brush_bg");
    const rect = mark?.items?.[0];
    if (rect === undefined || !(rect.width > 0)) return null;
    return [rect.x, rect.x + rect.width];
  }
  function expectOver(chart: Chart, lo: number, hi: number) {
    const view = viewOf(chart);
    const x = view.scale("x") as XScale;
    expect(brushRange(view.signal("brush"))).toEqual([lo, hi]);
    const rect = drawnRect(chart);
    if (rect === null) throw new Error("no brush rectangle drawn");
    expect(rect[0]).toBeCloseTo(x(lo - 0.5), 6);
    expect(rect[1]).toBeCloseTo(x(hi + 0.5), 6);
    expect(chart.el.dataset.brush).toBe(`${lo}-${hi}`);
  }

  it("draws the brush over the batches, keeps it over them as the domain and width change, and clears it", async () => {
    const reported: unknown[] = [];
    const chart = timeline((r) => reported.push(r));
    const store = new RowStore();
    await chart.apply(store.apply({ kind: "reset", seq: 0, data: { batches: batches(0, 10) } }));
    await chart.setBrush([3, 6]);
    expectOver(chart, 3, 6);
    const before = drawnRect(chart);
    // new batches extend the x domain: the rectangle moves with batches 3..6
    await chart.apply(store.apply({ kind: "upsert", seq: 1, data: { batches: batches(11, 20) } }));
    expectOver(chart, 3, 6);
    expect(drawnRect(chart)?.[0]).toBeLessThan(before?.[0] ?? 0);
    // a narrower container: same batches
    await chart.resize(180);
    expectOver(chart, 3, 6);
    // a single batch has a width
    await chart.setBrush([20, 20]);
    expectOver(chart, 20, 20);
    await chart.setBrush(null);
    expect(brushRange(viewOf(chart).signal("brush"))).toBeNull();
    expect(drawnRect(chart)).toBeNull();
    expect(chart.el.dataset.brush).toBe("");
    // nothing set programmatically is reported as a user's brush
    expect(reported).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("waits for the first data to place a brush asked for before it", async () => {
    const chart = timeline(() => {});
    await chart.setBrush([2, 4]);
    expect(brushRange(viewOf(chart).signal("brush"))).toBeNull();
    await chart.apply(new RowStore().apply({ kind: "reset", seq: 0, data: { batches: batches(0, 8) } }));
    expectOver(chart, 2, 4);
    expect(errors).toEqual([]);
  });

  it("waits for a width to place a brush (a view laid out at width 0)", async () => {
    const chart = timeline(() => {}, 0);
    await chart.apply(new RowStore().apply({ kind: "reset", seq: 0, data: { batches: batches(0, 8) } }));
    expect(viewOf(chart).width()).toBe(0);
    await chart.setBrush([5, 7]);
    expect(brushRange(viewOf(chart).signal("brush"))).toBeNull();
    await chart.resize(300);
    expectOver(chart, 5, 7);
    expect(errors).toEqual([]);
  });

  it("reports a user's brush, and leaves it as drawn when asked for the range it already shows", async () => {
    const reported: unknown[] = [];
    const chart = timeline((r) => reported.push(r));
    await chart.apply(new RowStore().apply({ kind: "reset", seq: 0, data: { batches: batches(0, 10) } }));
    const view = viewOf(chart);
    const x = view.scale("x") as XScale;
    // what a drag does: the pixel signal of the selection
    const dragged = [x(1.2), x(4.9)];
    view.signal("brush_x", dragged);
    await view.runAsync();
    expect(reported).toEqual([[2, 4]]);
    await chart.setBrush([2, 4]); // the kernel's echo: nothing to redraw
    expect(view.signal("brush_x")).toEqual(dragged);
    expect(reported).toEqual([[2, 4]]);
    expect(chart.el.dataset.brush).toBe("2-4");
  });

  it("ignores setBrush on a chart without a brush", async () => {
    const chart = makeChart(batchesSpec);
    await chart.setBrush([1, 2]);
    expect(chart.view).not.toBeNull();
    expect(chart.el.dataset.brush).toBeUndefined();
    expect(errorsOf(chart)).toEqual([]);
  });
});

describe("fitTextToWidth", () => {
  it("shortens titles to the plot's width and wraps legends into the columns that fit", () => {
    const spec: Record<string, unknown> = { title: "A long title for a narrow side panel", mark: "line" };
    fitTextToWidth(spec);
    expect(spec.title).toEqual({ text: "A long title for a narrow side panel", limit: { expr: "width" } });
    const legend = (spec.config as { legend: Record<string, unknown> }).legend;
    expect(legend.columns).toEqual({ expr: LEGEND_COLUMNS });
    expect(legend.labelLimit).toEqual({ expr: `max(40, width / (${LEGEND_COLUMNS}) - 50)` });
    // a spec's own choices stay
    const own: Record<string, unknown> = { title: { text: "t", limit: 80 }, config: { legend: { columns: 1 } } };
    fitTextToWidth(own);
    expect((own.title as { limit: unknown }).limit).toBe(80);
    expect((own.config as { legend: { columns: unknown } }).legend.columns).toBe(1);
  });
});
