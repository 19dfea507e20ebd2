import { afterEach, describe, expect, it, vi } from "vitest";
import type { VegaLiteSpec, WidgetModel } from "./model";
import { renderLive, renderStatic, StaticModel } from "./static";

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

describe("StaticModel.replace", () => {
  it("sets the traits that changed, keeps the reader's, and replays the new datasets to every view", async () => {
    const model = new StaticModel(state, { batches: rows });
    const got: unknown[] = [];
    const changed: string[] = [];
    model.on("msg:custom", (m: unknown) => got.push(m));
    for (const key of ["_status", "_title", "_selected", "_specs"]) model.on(`change:${key}`, () => changed.push(key));
    model.send({ kind: "replay-request", view: "v1" });
    await vi.waitFor(() => expect(got).toHaveLength(1));
    model.set("_selected", "lac");
    changed.length = 0;
    const status = { ...state._status, batches: 4 };
    const more = [...rows, { key: "3|aps", batch: 3, calibrator: "aps", coverage: 0.8 }];
    model.replace({ ...state, _specs: { coverage: { ...spec } }, _status: status, _selected: "" }, { batches: more });
    expect(changed).toEqual(["_status"]);
    expect(model.get("_status")).toEqual(status);
    expect(model.get("_selected")).toBe("lac");
    expect(got[1]).toEqual({ kind: "replay", view: "v1", seq: 1, data: { batches: more } });
  });
});

describe("renderLive", () => {
  it("updates the drawn marks and the status line in place when a newer snapshot arrives", async () => {
    const el = document.createElement("div");
    document.body.append(el);
    const live = renderLive(el, state, { batches: rows }, { renderer: "svg", viewId: "l" });
    const root = el.querySelector<HTMLElement>("div.calwatch-widget");
    if (root === null) throw new Error("no root");
    const marks = () => root.querySelectorAll('[data-chart="coverage"] g.mark-symbol path').length;
    await vi.waitFor(() => expect(marks()).toBe(6), { timeout: 5000 });
    const more = [...rows, ...["aps", "lac"].map((calibrator) => ({ key: `3|${calibrator}`, batch: 3, calibrator, coverage: 0.8 }))];
    live.update({ ...state, _status: { ...state._status, batches: 4 } }, { batches: more });
    await vi.waitFor(() => expect(marks()).toBe(8), { timeout: 5000 });
    expect(root.querySelector(".calwatch-status")?.textContent).toContain("4 batches");
    expect(el.querySelectorAll("div.calwatch-widget")).toHaveLength(1);
    live.dispose();
    expect(el.querySelector("div.calwatch-widget")).toBeNull();
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
