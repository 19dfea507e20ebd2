// Dashboard controls under the header: the what-if α slider (and the window it applies to), the
// class filter, the window size, and the brushed batch range with its "clear" button.
//
// Kernel-synced state read and written here: _alpha, _kept_share, _class_filter, _window_rows, _batch_range
// (model.set + save_changes; the kernel recomputes and sends the result to every view); read
// only: _alpha_info, _classes, _selectives, _readonly. Browser-only: the slider's position while dragging.

import type { AnyModel } from "@anywidget/types";
import type { AlphaInfo, WidgetModel } from "./model";

const int = new Intl.NumberFormat("en-US");
/** Window sizes offered (rows), those below the monitor's window. */
export const WINDOW_CHOICES = [1_000, 5_000, 10_000, 50_000, 100_000, 500_000];

/** "recomputed on batches 3–29 (13,500 rows kept; window 100,000) for lac, aps". */
export function formatAlphaInfo(info: Partial<AlphaInfo> | undefined): string {
  if (info === undefined || info.first_batch == null) return "no rows in the window yet";
  const span = info.first_batch === info.last_batch ? `batch ${info.first_batch}` : `batches ${info.first_batch}–${info.last_batch}`;
  const cals = (info.calibrators ?? []).join(", ");
  return `applies to ${span} (${int.format(info.n_rows ?? 0)} rows of the window of ${int.format(info.window ?? 0)})${cals ? ` for ${cals}` : ""}; sets recomputed from the fitted scores, no refitting`;
}

/** "batches 12–40" for a brushed range, "" for none. */
export function formatRange(range: readonly number[] | undefined): string {
  if (range === undefined || range.length !== 2) return "";
  return range[0] === range[1] ? `batch ${range[0]}` : `batches ${range[0]}–${range[1]}`;
}

export interface DashControls {
  readonly el: HTMLElement;
  dispose(): void;
}

export function createDashControls(model: AnyModel<WidgetModel>, doc: Document = document): DashControls {
  const el = doc.createElement("div");
  el.className = "calwatch-dash-controls";
  const part = <K extends keyof HTMLElementTagNameMap>(tag: K, className: string) => {
    const e = doc.createElement(tag);
    e.className = className;
    return e;
  };

  // α slider
  const alphaRow = part("div", "calwatch-alpha-row");
  const alphaLabel = part("label", "calwatch-alpha-label");
  const alphaText = part("span", "calwatch-alpha-text");
  const alpha = part("input", "calwatch-alpha");
  alpha.type = "range";
  alpha.min = "0.01";
  alpha.max = "0.5";
  alpha.step = "0.01";
  alpha.setAttribute("aria-label", "What-if level α");
  alphaLabel.append(alphaText, alpha);
  const alphaReset = part("button", "calwatch-alpha-reset");
  alphaReset.type = "button";
  alphaReset.textContent = "own α";
  alphaReset.title = "Back to each calibrator's own level";
  const alphaInfo = part("div", "calwatch-alpha-info");
  alphaRow.append(alphaLabel, alphaReset, alphaInfo);

  // kept-share slider of selective calibrators (re-tunes their thresholds on the window)
  const keptRow = part("div", "calwatch-kept-row");
  const keptLabel = part("label", "calwatch-kept-label");
  const keptText = part("span", "calwatch-kept-text");
  const kept = part("input", "calwatch-kept");
  kept.type = "range";
  kept.min = "0.05";
  kept.max = "1";
  kept.step = "0.05";
  kept.setAttribute("aria-label", "Share of rows the selective calibrators keep");
  keptLabel.append(keptText, kept);
  keptRow.append(keptLabel);

  // filters
  const filterRow = part("div", "calwatch-filter-row");
  const classes = part("select", "calwatch-class-filter");
  classes.setAttribute("aria-label", "Class filter");
  const windowRows = part("select", "calwatch-window-rows");
  windowRows.setAttribute("aria-label", "Window size for the window panels");
  const range = part("span", "calwatch-range");
  const rangeClear = part("button", "calwatch-range-clear");
  rangeClear.type = "button";
  rangeClear.textContent = "clear";
  rangeClear.setAttribute("aria-label", "Clear the batch range");
  filterRow.append(classes, windowRows, range, rangeClear);
  el.append(alphaRow, keptRow, filterRow);

  const readonly = () => Boolean(model.get("_readonly"));

  const showAlpha = (value: number) => {
    alphaText.textContent = `what-if α = ${value.toFixed(2)} (1−α = ${(1 - value).toFixed(2)}) `;
  };
  const drawAlpha = () => {
    const info = model.get("_alpha_info");
    const available = (info?.calibrators ?? []).length > 0;
    alphaRow.hidden = readonly() || !available;
    const value = model.get("_alpha");
    const active = typeof value === "number";
    alphaRow.classList.toggle("calwatch-alpha-active", active);
    if (active) alpha.value = String(value);
    else {
      const targets = Object.values(info?.targets ?? {});
      alpha.value = String(targets.length > 0 ? Math.round((1 - (targets[0] ?? 0.9)) * 100) / 100 : 0.1);
    }
    if (active) showAlpha(Number(alpha.value));
    else alphaText.textContent = "what-if α: off (move to recompute) ";
    alphaReset.hidden = !active;
    alphaInfo.textContent = formatAlphaInfo(info);
  };
  const showKept = (value: number) => {
    keptText.textContent = `keep ξ = ${value.toFixed(2)} of rows (selector threshold re-tuned on the window) `;
  };
  const drawKept = () => {
    const names = model.get("_selectives") ?? [];
    keptRow.hidden = readonly() || names.length === 0;
    const value = model.get("_kept_share");
    if (typeof value === "number") {
      kept.value = String(value);
      showKept(value);
    } else keptText.textContent = `keep ξ: as fitted (${names.join(", ")}) `;
  };
  const drawClasses = () => {
    const names = model.get("_classes") ?? [];
    const selected = model.get("_class_filter") ?? "";
    const all = doc.createElement("option");
    all.value = "";
    all.textContent = "All classes";
    const options = [...names, ...(selected !== "" && !names.includes(selected) ? [selected] : [])].map((n) => {
      const o = doc.createElement("option");
      o.value = n;
      o.textContent = n;
      return o;
    });
    classes.replaceChildren(all, ...options);
    classes.value = selected;
    classes.hidden = names.length === 0;
  };
  const drawWindow = () => {
    const info = model.get("_alpha_info");
    const window = info?.window ?? 0;
    const current = model.get("_window_rows") ?? 0;
    const choices = WINDOW_CHOICES.filter((n) => n < window);
    if (current > 0 && !choices.includes(current)) choices.push(current);
    const whole = doc.createElement("option");
    whole.value = "0";
    whole.textContent = `window: all kept rows (${int.format(window)})`;
    windowRows.replaceChildren(
      whole,
      ...choices.sort((a, b) => a - b).map((n) => {
        const o = doc.createElement("option");
        o.value = String(n);
        o.textContent = `window: last ${int.format(n)} rows`;
        return o;
      }),
    );
    windowRows.value = String(current);
    windowRows.hidden = readonly() || window === 0;
  };
  const drawRange = () => {
    const text = formatRange(model.get("_batch_range"));
    range.textContent = text === "" ? "" : `showing ${text}`;
    range.hidden = text === "";
    rangeClear.hidden = text === "";
    el.dataset.batchRange = text;
  };

  const save = () => model.save_changes();
  const onAlphaInput = () => showAlpha(Number(alpha.value));
  const onAlphaChange = () => {
    model.set("_alpha", Number(alpha.value));
    save();
  };
  const onReset = () => {
    model.set("_alpha", null);
    save();
  };
  const onKeptInput = () => showKept(Number(kept.value));
  const onKeptChange = () => {
    model.set("_kept_share", Number(kept.value));
    save();
  };
  const onClass = () => {
    model.set("_class_filter", classes.value);
    save();
  };
  const onWindow = () => {
    model.set("_window_rows", Number(windowRows.value));
    save();
  };
  const onClear = () => {
    model.set("_batch_range", []);
    save();
  };
  alpha.addEventListener("input", onAlphaInput);
  alpha.addEventListener("change", onAlphaChange);
  alphaReset.addEventListener("click", onReset);
  classes.addEventListener("change", onClass);
  windowRows.addEventListener("change", onWindow);
  rangeClear.addEventListener("click", onClear);
  kept.addEventListener("input", onKeptInput);
  kept.addEventListener("change", onKeptChange);
  const listeners: [string, () => void][] = [
    ["change:_alpha", drawAlpha],
    ["change:_alpha_info", drawAlpha],
    ["change:_alpha_info", drawWindow],
    ["change:_window_rows", drawWindow],
    ["change:_classes", drawClasses],
    ["change:_class_filter", drawClasses],
    ["change:_batch_range", drawRange],
    ["change:_selectives", drawKept],
    ["change:_kept_share", drawKept],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);
  drawAlpha();
  drawClasses();
  drawWindow();
  drawRange();
  drawKept();

  return {
    el,
    dispose() {
      for (const [event, fn] of listeners) model.off(event, fn);
      alpha.removeEventListener("input", onAlphaInput);
      alpha.removeEventListener("change", onAlphaChange);
      alphaReset.removeEventListener("click", onReset);
      classes.removeEventListener("change", onClass);
      windowRows.removeEventListener("change", onWindow);
      rangeClear.removeEventListener("click", onClear);
      kept.removeEventListener("input", onKeptInput);
      kept.removeEventListener("change", onKeptChange);
    },
  };
}
