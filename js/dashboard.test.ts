import { describe, expect, it } from "vitest";
import { cardLines, cardStatus } from "./cards";
import { brushRange, escapeHtml } from "./charts";
import { createDashControls, formatAlphaInfo, formatRange } from "./dashcontrols";
import { noteHeading } from "./notes";
import { cellText } from "./rowtable";
import { RowStore } from "./stream";
import { FakeModel } from "./test-utils";
import { itemOrder } from "./widget";

describe("tombstones", () => {
  it("remove their key and insert nothing", () => {
    const store = new RowStore();
    store.apply({ kind: "upsert", seq: 1, data: { what_if: [{ key: "0|a", v: 1 }, { key: "1|a", v: 2 }] } });
    const update = store.apply({ kind: "upsert", seq: 2, data: { what_if: [{ key: "0|a", _deleted: true }, { key: "2|a", v: 3 }] } });
    expect(store.rows("what_if").map((r) => r.key)).toEqual(["1|a", "2|a"]);
    const change = update.changes.get("what_if");
    expect([...(change?.replaces ?? [])]).toEqual(["0|a"]);
    expect(change?.rows.map((r) => r.key)).toEqual(["2|a"]);
    expect(update.counts.what_if).toBe(2);
  });
});

describe("itemOrder", () => {
  it("keeps the chart kinds' order and puts each panel after the first kind of its section", () => {
    const sections = [
      { name: "Overview", charts: ["labels"] },
      { name: "Coverage", charts: ["coverage", "what_if", "class_coverage"] },
      { name: "Calibration", charts: ["reliability"] },
    ];
    const out = itemOrder(["coverage", "class_coverage", "labels"], sections);
    expect(out.map((o) => [o.name, o.section, o.panel])).toEqual([
      ["coverage", "Coverage", false],
      ["what_if", "Coverage", true],
      ["class_coverage", "Coverage", false],
      ["labels", "Overview", false],
      ["reliability", "Calibration", true],
    ]);
  });
  it("sends a kind no section lists to the first section that is not Overview", () => {
    const out = itemOrder(["new_kind"], [{ name: "Overview", charts: [] }, { name: "Risk", charts: [] }]);
    expect(out).toEqual([{ name: "new_kind", section: "Risk", panel: false }]);
  });
});

describe("brushRange", () => {
  it("keeps the whole batches inside the brushed extent", () => {
    expect(brushRange({ batch: [2.3, 6.9] })).toEqual([3, 6]);
    expect(brushRange({ batch: [6.9, 2.3] })).toEqual([3, 6]);
    expect(brushRange({ batch: [2.2, 2.8] })).toBeNull();
    expect(brushRange({})).toBeNull();
    expect(brushRange(null)).toBeNull();
  });
});

describe("escaping and formatting", () => {
  it("escapes every markup character in tooltips", () => {
    expect(escapeHtml(`<img src=x onerror="alert('1')">&`)).toBe(
      "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;",
    );
  });
  it("formats row-table cells, note headings, ranges and the α window", () => {
    expect(cellText("set", ["a", "<b>"])).toBe("{a, <b>}");
    expect(cellText("label", null)).toBe("(no label yet)");
    expect(cellText("confidence", 0.123456)).toBe("0.1235");
    expect(noteHeading({ key: "0", batch: 3, author: "ana", at: "t" })).toBe("batch 3 · ana · t");
    expect(noteHeading({ key: "1", episode: 2 })).toBe("warning #2");
    expect(formatRange([4, 6])).toBe("batches 4–6");
    expect(formatRange([])).toBe("");
    expect(
      formatAlphaInfo({ first_batch: 3, last_batch: 9, n_rows: 2800, window: 100000, calibrators: ["lac"] }),
    ).toContain("applies to batches 3–9 (2,800 rows of the window of 100,000) for lac");
  });
  it("states coverage against the target on a card, and flags an interval below it", () => {
    const row = {
      key: "lac", kind: "sets", target: 0.9, n_batches: 4, n_rows: 400, n_labelled: 300,
      coverage: 0.8, coverage_lo: 0.75, coverage_hi: 0.85, mean_set_size: 1.5, open_warnings: 1,
    };
    expect(cardLines(row).map(([, t]) => t)).toEqual([
      "coverage 0.800 [0.750, 0.850] vs target 0.900",
      "mean set size 1.50",
      "whole stream: 300 labelled of 400 rows · 4 batches",
      "1 open warning",
    ]);
    expect(cardStatus(row)).toBe("below");
    // acknowledged warnings are counted apart (they left the banners)
    const last = (r: typeof row & Record<string, unknown>) => cardLines(r).slice(-1)[0]?.[1];
    expect(last({ ...row, open_warnings: 0, acknowledged_warnings: 2 })).toBe("2 acknowledged");
    expect(last({ ...row, model_warnings: 1, acknowledged_warnings: 1 })).toBe(
      "1 open warning · 1 on the model · 1 acknowledged",
    );
    // Risk: one number per scope, each named; the observed error with its exact band.
    const unlabelled = cardLines({ key: "r", kind: "risk", n_batches: 1, n_rows: 10, n_labelled: 0, estimated_error: 0.2 });
    expect(unlabelled.slice(0, 2)).toEqual([
      ["calwatch-card-error", "whole stream: estimate 0.200 (estimate)"],
      ["calwatch-card-observed", "observed: no labels yet"],
    ]);
    const invcp = {
      key: "r", kind: "risk", n_batches: 3, n_rows: 10, n_labelled: 5, estimated_error: 0.2, observed_error: 0.1,
      observed_error_lo: 0.005, observed_error_hi: 0.716, last_batch: 2,
    };
    expect(cardLines({ ...invcp, estimate_promise: "upper estimate (conservative)" }).slice(0, 2)).toEqual([
      ["calwatch-card-error", "whole stream: estimate 0.200 (upper estimate (conservative))"],
      ["calwatch-card-observed", "observed 0.100 [0.005, 0.716] on 5 labelled rows"],
    ]);
    // A guarded estimate states a band: of the latest batch, and the card says so.
    const guarded = { ...invcp, latest_error_band_lo: 0.15, latest_error_band_hi: 0.25 };
    expect(cardLines(guarded)[2]).toEqual(["calwatch-card-band", "batch 2: 95% band [0.150, 0.250]"]);
  });
});

describe("kept-share slider", () => {
  it("shows only with selective calibrators, writes _kept_share on change, and hides when read-only", () => {
    const model = new FakeModel({ _selectives: [] });
    const controls = createDashControls(model, document);
    const row = controls.el.querySelector<HTMLElement>(".calwatch-kept-row");
    const slider = controls.el.querySelector<HTMLInputElement>("input.calwatch-kept");
    if (row === null || slider === null) throw new Error("no kept-share slider");
    expect(row.hidden).toBe(true);
    model.set("_selectives", ["s-mmce"]);
    expect(row.hidden).toBe(false);
    expect(row.textContent).toContain("as fitted (s-mmce)");
    slider.value = "0.6";
    slider.dispatchEvent(new Event("change"));
    expect(model.get("_kept_share")).toBe(0.6);
    expect(model.saves).toBe(1);
    expect(row.textContent).toContain("keep ξ = 0.60 of rows");
    model.set("_readonly", true);
    model.set("_kept_share", 0.5);
    expect(row.hidden).toBe(true);
    controls.dispose();
  });
});
