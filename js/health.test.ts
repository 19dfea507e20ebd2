import { afterEach, describe, expect, it, vi } from "vitest";
import { createHealth, SPARK_HEIGHT, sparkPath, sparkRange, stateLabel } from "./health";
import { type KeyedRow, parseHealth, type SparkPoint, type VegaLiteSpec } from "./model";
import { FakeModel } from "./test-utils";
import { renderView } from "./widget";

function row(calibrator: string, state: string, extra: Record<string, unknown> = {}): KeyedRow {
  return {
    key: calibrator,
    calibrator,
    kind: "sets",
    promise: "90% coverage",
    state,
    reason: `why ${calibrator}`,
    value: 0.91,
    lo: 0.88,
    hi: 0.93,
    reference: 0.884,
    target: 0.9,
    n_labelled: 1500,
    n_batches: 5,
    first_batch: 2,
    last_batch: 6,
    episodes: [],
    spark: [
      [5, 0.9, 0.9],
      [6, null, 0.9],
      [7, 0.92, 0.9],
    ],
    ...extra,
  };
}

afterEach(() => {
  document.body.replaceChildren();
  document.getElementById("calwatch-widget-style")?.remove();
});

describe("parseHealth", () => {
  it("keeps valid rows typed and drops those without a calibrator or a known state", () => {
    const { rows, problems } = parseHealth([
      row("lac", "holding"),
      row("bad", "sunny"),
      { key: "x", state: "broken" },
      row("aps", "broken", { value: "0.3", episodes: [3, "4"], spark: [[1, 0.5, null], ["x", 1, 1], [2, Number.NaN, 0.9]] }),
    ]);
    expect(rows.map((r) => [r.calibrator, r.state])).toEqual([
      ["lac", "holding"],
      ["aps", "broken"],
    ]);
    const aps = rows[1];
    expect(aps?.value).toBeNull(); // a string is no number
    expect(aps?.episodes).toEqual([3]);
    expect(aps?.spark).toEqual([
      [1, 0.5, null],
      [2, null, 0.9],
    ]);
    expect(problems).toEqual([
      'health row "bad": no calibrator or an unknown state',
      'health row "x": no calibrator or an unknown state',
      'health row "aps": 1 bad sparkline point(s)',
    ]);
  });
});

describe("sparkline", () => {
  const points: SparkPoint[] = [
    [10, 0.8, 0.9],
    [11, null, 0.9],
    [12, 1.0, 0.9],
  ];
  it("breaks the line at batches without a value and maps values into the box", () => {
    expect(sparkPath(points, 1, 0.8, 1.0)).toBe(`M2.0,${SPARK_HEIGHT - 2}.0M62.0,2.0`);
    expect(sparkPath(points, 2, 0.8, 1.0)).toBe("M2.0,9.0L32.0,9.0L62.0,9.0");
    expect(sparkPath([], 1, 0, 1)).toBe("");
  });
  it("spans every value and reference, padded", () => {
    const [lo, hi] = sparkRange(points);
    expect(lo).toBeCloseTo(0.78);
    expect(hi).toBeCloseTo(1.02);
    expect(sparkRange([[0, null, null]])).toEqual([0, 1]);
  });
});

describe("createHealth", () => {
  it("draws one chip per calibrator in the calibrators' order, with state, promise and reason as text", () => {
    const strip = createHealth(document);
    document.body.append(strip.el);
    expect(strip.el.hidden).toBe(true);
    const hostile = "<img src=x onerror=alert(1)>";
    const problems = strip.draw(
      [row("risk", "broken", { promise: `risk ≤ 0.300 ${hostile}` }), row("lac", "holding"), row("new", "waiting")],
      ["lac", "risk", "new"],
    );
    expect(problems).toBe("");
    expect(strip.el.hidden).toBe(false);
    const chips = [...strip.el.querySelectorAll<HTMLElement>(".calwatch-chip")];
    expect(chips.map((c) => [c.dataset.calibrator, c.dataset.state])).toEqual([
      ["lac", "holding"],
      ["risk", "broken"],
      ["new", "waiting"],
    ]);
    expect(strip.el.dataset.worst).toBe("broken");
    expect(chips[1]?.querySelector(".calwatch-chip-promise")?.textContent).toBe(`risk ≤ 0.300 ${hostile}`);
    expect(chips[1]?.querySelector(".calwatch-chip-state")?.textContent).toBe("broken");
    expect(chips[2]?.querySelector(".calwatch-chip-state")?.textContent).toBe(stateLabel("waiting"));
    expect(chips[0]?.querySelector(".calwatch-chip-reason")?.textContent).toBe("why lac");
    expect(strip.el.querySelectorAll("img").length).toBe(0);
    // the sparkline: value line with a gap, and the reference
    expect(chips[0]?.querySelectorAll("svg.calwatch-chip-spark path.calwatch-spark-line").length).toBe(1);
    expect(chips[0]?.querySelector("path.calwatch-spark-line")?.getAttribute("d")?.match(/M/g)?.length).toBe(2);
    expect(chips[0]?.querySelectorAll("path.calwatch-spark-ref").length).toBe(1);
  });
  it("leaves the chips alone when nothing changed, and reports bad rows", () => {
    const strip = createHealth(document);
    strip.draw([row("lac", "holding")], ["lac"]);
    const chip = strip.el.querySelector(".calwatch-chip");
    strip.draw([row("lac", "holding")], ["lac"]);
    expect(strip.el.querySelector(".calwatch-chip")).toBe(chip);
    expect(strip.draw([row("lac", "fine")], ["lac"])).toContain("unknown state");
    expect(strip.el.hidden).toBe(true);
  });
});

const whatIfSpec: VegaLiteSpec = {
  data: { name: "what_if" },
  mark: "point",
  encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" } },
  height: 100,
};

describe("the dashboard", () => {
  function mount(model: FakeModel) {
    const el = document.createElement("div");
    document.body.append(el);
    const cleanup = renderView(model, el, { renderer: "svg", viewId: "v1" });
    const root = el.querySelector<HTMLElement>("div.calwatch-widget");
    if (root === null) throw new Error("no root");
    return { root, cleanup };
  }
  it("draws the health strip from the health dataset, follows upserts of it, and colours the cards by it", async () => {
    const model = new FakeModel({ _calibrators: ["lac", "risk"], _sections: [{ name: "Overview", charts: [] }] });
    const { root, cleanup } = mount(model);
    // the whole stream's card says "below" by its own numbers; the strip's state (now) decides
    const overview = [
      { key: "lac", calibrator: "lac", kind: "sets", n_batches: 8, target: 0.9, coverage: 0.88, coverage_hi: 0.89 },
      { key: "risk", calibrator: "risk", kind: "risk", n_batches: 8, estimated_error: 0.2, observed_error: 0.4 },
    ];
    const health = [row("lac", "holding"), row("risk", "waiting")];
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { health, overview } });
    const states = () =>
      [...root.querySelectorAll<HTMLElement>(".calwatch-health .calwatch-chip")].map((c) => c.dataset.state);
    const cards = () => [...root.querySelectorAll<HTMLElement>(".calwatch-card")].map((c) => c.dataset.status ?? "");
    await vi.waitFor(() => expect(states()).toEqual(["holding", "waiting"]));
    expect(cards()).toEqual(["ok", ""]);
    model.receive({ kind: "upsert", seq: 1, data: { health: [row("risk", "broken")] } });
    await vi.waitFor(() => expect(states()).toEqual(["holding", "broken"]));
    expect(cards()).toEqual(["ok", "below"]);
    cleanup();
  });
  it("hides the what-if panel until the α slider is used", async () => {
    const model = new FakeModel({
      _specs: { what_if: whatIfSpec },
      _chart_order: [],
      _sections: [{ name: "Coverage", charts: ["what_if"] }],
      _alpha: null,
    });
    const { root, cleanup } = mount(model);
    const panel = () => root.querySelector<HTMLElement>('div.calwatch-panel[data-panel="what_if"]');
    expect(panel()?.hidden).toBe(true);
    model.set("_alpha", 0.2);
    expect(panel()?.hidden).toBe(false);
    model.set("_alpha", null);
    expect(panel()?.hidden).toBe(true);
    // rows computed at some α (another view moved the slider) show it too
    model.receive({ kind: "replay", view: "v1", seq: 0, data: { what_if: [{ key: "0|lac", batch: 0, coverage: 0.8 }] } });
    await vi.waitFor(() => expect(panel()?.hidden).toBe(false));
    cleanup();
  });
});
