import { afterEach, describe, expect, it } from "vitest";
import { calibratorOptions, createControls, formatStatus } from "./controls";
import { FakeModel } from "./test-utils";

const status = {
  rows_seen: 12345,
  rows_labelled: 10000,
  rows_pending: 2345,
  batches: 8,
  labels_unmatched: 0,
  rows_in_window: 5000,
};

afterEach(() => {
  document.body.replaceChildren();
});

describe("formatStatus", () => {
  it("formats the counters with thousands separators", () => {
    expect(formatStatus(status)).toBe("12,345 rows · 10,000 labelled · 2,345 awaiting labels · 8 batches");
  });

  it("mentions unmatched labels only when there are some", () => {
    expect(formatStatus({ ...status, labels_unmatched: 3 })).toBe(
      "12,345 rows · 10,000 labelled · 2,345 awaiting labels · 8 batches · 3 labels for unknown/expired ids",
    );
    expect(formatStatus({ ...status, labels_unmatched: 1 })).toMatch(/· 1 label for unknown\/expired ids$/);
  });

  it("names the tables the batches came from", () => {
    expect(formatStatus({ ...status, sources: "spark: 1,204,331,000 rows, 365 buckets" })).toBe(
      "12,345 rows · 10,000 labelled · 2,345 awaiting labels · 8 batches · from spark: 1,204,331,000 rows, 365 buckets",
    );
    expect(formatStatus({ ...status, sources: "" })).not.toMatch(/from/);
  });

  it("uses singulars for one and copes with a missing status", () => {
    expect(formatStatus({ ...status, rows_seen: 1, batches: 1 })).toMatch(/^1 row · .* · 1 batch$/);
    expect(formatStatus(undefined)).toBe("0 rows · 0 labelled · 0 awaiting labels · 0 batches");
    expect(formatStatus({ ...status, classes_untested: 23 })).toMatch(/· 23 classes too rare for a per-class test$/);
    expect(formatStatus({ ...status, detectors_on_correlated_rows: 2 })).toMatch(
      /· 2 label tests on correlated rows \(give blocks=\)$/,
    );
  });
});

describe("calibratorOptions", () => {
  it("puts All calibrators first, then the names", () => {
    expect(calibratorOptions(["aps", "lac"], "")).toEqual([
      { value: "", label: "All calibrators" },
      { value: "aps", label: "aps" },
      { value: "lac", label: "lac" },
    ]);
  });

  it("keeps a selection that is not (yet) in the list", () => {
    expect(calibratorOptions(["aps"], "raps").map((o) => o.value)).toEqual(["", "aps", "raps"]);
  });
});

describe("createControls", () => {
  function setup(state: ConstructorParameters<typeof FakeModel>[0] = {}) {
    const model = new FakeModel({ _title: "Live coverage", _calibrators: ["aps", "lac"], _status: status, ...state });
    const controls = createControls(model);
    document.body.append(controls.el);
    const q = <T extends Element>(sel: string) => {
      const el = controls.el.querySelector<T>(sel);
      if (el === null) throw new Error(`missing ${sel}`);
      return el;
    };
    return { model, controls, q };
  }

  it("draws title, picker options and status from the model", () => {
    const { q } = setup({ _selected: "lac" });
    expect(q(".calwatch-title").textContent).toBe("Live coverage");
    const select = q<HTMLSelectElement>("select");
    expect([...select.options].map((o) => [o.value, o.textContent])).toEqual([
      ["", "All calibrators"],
      ["aps", "aps"],
      ["lac", "lac"],
    ]);
    expect(select.value).toBe("lac");
    expect(q(".calwatch-status").textContent).toBe(formatStatus(status));
  });

  it("writes the picked calibrator to _selected and saves", () => {
    const { model, q } = setup();
    const select = q<HTMLSelectElement>("select");
    select.value = "aps";
    select.dispatchEvent(new Event("change"));
    expect(model.get("_selected")).toBe("aps");
    expect(model.saves).toBe(1);
    select.value = "";
    select.dispatchEvent(new Event("change"));
    expect(model.get("_selected")).toBe("");
    expect(model.saves).toBe(2);
  });

  it("toggles _paused with the pause button and relabels it", () => {
    const { model, q } = setup();
    const button = q<HTMLButtonElement>("button.calwatch-pause");
    expect(button.textContent).toBe("Pause");
    button.click();
    expect(model.get("_paused")).toBe(true);
    expect(model.saves).toBe(1);
    expect(button.textContent).toBe("Resume");
    expect(button.getAttribute("aria-pressed")).toBe("true");
    button.click();
    expect(model.get("_paused")).toBe(false);
    expect(model.saves).toBe(2);
    expect(button.textContent).toBe("Pause");
  });

  it("follows kernel-side changes of every trait", () => {
    const { model, q } = setup();
    model.set("_title", "Other");
    model.set("_calibrators", ["aps", "lac", "raps"]);
    model.set("_selected", "raps");
    model.set("_status", { ...status, rows_seen: 20000, labels_unmatched: 2 });
    model.set("_paused", true);
    expect(q(".calwatch-title").textContent).toBe("Other");
    const select = q<HTMLSelectElement>("select");
    expect(select.options).toHaveLength(4);
    expect(select.value).toBe("raps");
    expect(q(".calwatch-status").textContent).toContain("20,000 rows");
    expect(q(".calwatch-status").textContent).toContain("2 labels for unknown/expired ids");
    expect(q("button").textContent).toBe("Resume");
    expect(model.saves).toBe(0); // kernel writes are not echoed back
  });

  it("shows the queued count only while paused", () => {
    const { model, controls, q } = setup();
    controls.setPending(3);
    expect(q(".calwatch-pending").textContent).toBe("");
    model.set("_paused", true);
    controls.setPending(3);
    expect(q(".calwatch-pending").textContent).toBe(" · paused, 3 updates queued");
  });

  it("shows kernel and local errors, hidden when there are none", () => {
    const { model, controls, q } = setup();
    const box = q<HTMLDivElement>(".calwatch-error");
    expect(box.hidden).toBe(true);
    model.set("_error", "ValueError: bad batch");
    expect(box.hidden).toBe(false);
    expect(box.textContent).toBe("ValueError: bad batch");
    controls.setLocalError("stream", "ProtocolError: x");
    controls.setLocalError("charts", "No spec for chart(s): y");
    expect(box.textContent).toBe("ValueError: bad batch\nProtocolError: x\nNo spec for chart(s): y");
    controls.setLocalError("charts", "");
    expect(box.textContent).toBe("ValueError: bad batch\nProtocolError: x");
    model.set("_error", "");
    controls.setLocalError("stream", "");
    expect(box.hidden).toBe(true);
  });

  it("unregisters every listener on dispose", () => {
    const { model, controls, q } = setup();
    controls.dispose();
    for (const trait of ["_title", "_calibrators", "_selected", "_paused", "_status", "_error"]) {
      expect(model.listenerCount(`change:${trait}`)).toBe(0);
    }
    q<HTMLButtonElement>("button").click();
    expect(model.get("_paused")).toBe(false);
  });
});
