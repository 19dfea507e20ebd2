import { afterEach, describe, expect, it, vi } from "vitest";
import type { VegaLiteSpec, WidgetModel } from "./model";
import { renderStatic, StaticModel } from "./static";

const spec: VegaLiteSpec = {
  params: [{ name: "calibrator", value: "(all)" }],
  data: { name: "batches" },
  transform: [{ filter: "calibrator == '(all)' || datum.calibrator == calibrator" }],
  mark: "point",
  encoding: { x: { field: "batch", type: "quantitative" }, y: { field: "coverage", type: "quantitative" } },
  height: 100,
};
const warning = {
  episode: 0, name: "lac: coverage drop", threatens: "coverage", explanation: "labelled rows miss",
  action: "recalibrate", statistic: 3, threshold: 2, false_alarm_control: "Ville", first_batch: 1,
  last_batch: 2, open: true, acknowledged: false, ack_note: null, ack_by: null, ack_at: null,
};
const state: WidgetModel = {
  _title: "Saved <monitor>",
  _specs: { coverage: spec },
  _chart_order: ["coverage"],
  _calibrators: ["aps", "lac"],
  _selected: "",
  _paused: true,
  _status: { rows_seen: 30, rows_labelled: 20, rows_pending: 10, batches: 3, labels_unmatched: 0, rows_in_window: 30 },
  _error: "",
  _warnings: [warning as never],
};
const rows = [0, 1, 2].flatMap((batch) =>
  ["aps", "lac"].map((calibrator) => ({ key: `${batch}|${calibrator}`, batch, calibrator, coverage: 0.9 })),
);

afterEach(() => {
  document.body.replaceChildren();
  document.getElementById("calwatch-widget-style")?.remove();
});

describe("StaticModel", () => {
  it("answers a replay request asynchronously with the saved datasets and ignores other messages", async () => {
    const model = new StaticModel(state, { batches: rows });
    const got: unknown[] = [];
    model.on("msg:custom", (m: unknown) => got.push(m));
    model.send({ kind: "acknowledge", episode: 0, note: "" });
    model.send({ kind: "replay-request", view: "v9" });
    expect(got).toEqual([]);
    await vi.waitFor(() => expect(got).toHaveLength(1));
    expect(got[0]).toEqual({ kind: "replay", view: "v9", seq: 0, data: { batches: rows } });
  });

  it("is read-only and live, whatever the saved state said", () => {
    const model = new StaticModel(state, {});
    expect(model.get("_readonly")).toBe(true);
    expect(model.get("_paused")).toBe(false);
    let changes = 0;
    model.on("change:_selected", () => changes++);
    model.set("_selected", "lac");
    model.set("_selected", "lac");
    expect([model.get("_selected"), changes]).toEqual(["lac", 1]);
  });
});

describe("renderStatic", () => {
  it("draws every saved row, hides pause and acknowledge, and keeps the picker working", async () => {
    const el = document.createElement("div");
    document.body.append(el);
    renderStatic(el, state, { batches: rows }, { renderer: "svg", viewId: "r" });
    const root = el.querySelector<HTMLElement>("div.calwatch-widget");
    if (root === null) throw new Error("no root");
    await vi.waitFor(() => expect(root.querySelectorAll('[data-chart="coverage"] g.mark-symbol path')).toHaveLength(6), {
      timeout: 5000,
    });
    expect(root.querySelector<HTMLButtonElement>("button.calwatch-pause")?.hidden).toBe(true);
    expect(root.querySelector<HTMLButtonElement>("button.calwatch-ack")?.hidden).toBe(true);
    expect(root.querySelector(".calwatch-title")?.textContent).toBe("Saved <monitor>");
    expect(root.querySelector(".calwatch-title")?.innerHTML).toBe("Saved &lt;monitor&gt;");
    const picker = root.querySelector<HTMLSelectElement>("select.calwatch-picker");
    if (picker === null) throw new Error("no picker");
    picker.value = "lac";
    picker.dispatchEvent(new Event("change"));
    await vi.waitFor(() => expect(root.querySelectorAll('[data-chart="coverage"] g.mark-symbol path')).toHaveLength(3), {
      timeout: 5000,
    });
  });
});
