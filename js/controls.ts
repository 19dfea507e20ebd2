// Header controls: title, calibrator picker, pause toggle, status line, error box.
//
// Kernel-synced state read here: _title, _calibrators, _selected, _paused, _status, _notices, _error
// (the picker and the toggle write _selected / _paused back with model.set + save_changes).
// Browser-only UI state kept here: the queued-updates hint and local (front-end) errors.

import type { AnyModel } from "@anywidget/types";
import type { Status, WidgetModel } from "./model";

const fmt = new Intl.NumberFormat("en-US");

function count(n: number, one: string, many: string): string {
  return `${fmt.format(n)} ${n === 1 ? one : many}`;
}

/** "12,345 rows · 10,000 labelled · 2,345 awaiting labels · 8 batches[ · N labels for …]". */
export function formatStatus(status: Partial<Status> | null | undefined): string {
  const s = status ?? {};
  const parts = [
    count(s.rows_seen ?? 0, "row", "rows"),
    `${fmt.format(s.rows_labelled ?? 0)} labelled`,
    `${fmt.format(s.rows_pending ?? 0)} awaiting labels`,
    count(s.batches ?? 0, "batch", "batches"),
  ];
  const unmatched = s.labels_unmatched ?? 0;
  if (unmatched > 0) {
    parts.push(`${count(unmatched, "label", "labels")} for unknown/expired ids`);
  }
  const untested = s.classes_untested ?? 0;
  if (untested > 0) {
    parts.push(`${count(untested, "class", "classes")} too rare for a per-class test`);
  }
  const correlated = s.detectors_on_correlated_rows ?? 0;
  if (correlated > 0) {
    parts.push(`${count(correlated, "label test", "label tests")} on correlated rows (give blocks=)`);
  }
  if (s.sources) {
    parts.push(`from ${s.sources}`);
  }
  return parts.join(" · ");
}

/** Picker options: "All calibrators" ("") first, then the names (plus an unknown selection). */
export function calibratorOptions(
  calibrators: readonly string[],
  selected: string,
): { value: string; label: string }[] {
  const names = [...calibrators];
  if (selected !== "" && !names.includes(selected)) names.push(selected);
  return [{ value: "", label: "All calibrators" }, ...names.map((n) => ({ value: n, label: n }))];
}

export interface Controls {
  readonly el: HTMLElement;
  /** Browser-only: how many updates wait (paused, or before the replay). */
  setPending(n: number): void;
  /** Browser-only: an error of the front end itself, per source ("" clears that source). */
  setLocalError(source: string, message: string): void;
  /** Unregisters the model listeners. */
  dispose(): void;
}

export function createControls(model: AnyModel<WidgetModel>, doc: Document = document): Controls {
  const el = doc.createElement("div");
  el.className = "calwatch-controls";

  const header = doc.createElement("div");
  header.className = "calwatch-header";
  const title = doc.createElement("div");
  title.className = "calwatch-title";
  const select = doc.createElement("select");
  select.className = "calwatch-picker";
  select.setAttribute("aria-label", "Calibrator");
  const pause = doc.createElement("button");
  pause.type = "button";
  pause.className = "calwatch-pause";
  header.append(title, select, pause);

  const status = doc.createElement("div");
  status.className = "calwatch-status";
  const statusText = doc.createElement("span");
  const pending = doc.createElement("span");
  pending.className = "calwatch-pending";
  status.append(statusText, pending);

  const error = doc.createElement("div");
  error.className = "calwatch-error";
  error.setAttribute("role", "alert");
  el.append(header, status, error);

  const localErrors = new Map<string, string>();
  let pendingCount = 0;

  const drawTitle = () => {
    title.textContent = model.get("_title") ?? "";
  };
  const drawPicker = () => {
    const selected = model.get("_selected") ?? "";
    const options = calibratorOptions(model.get("_calibrators") ?? [], selected);
    select.replaceChildren(
      ...options.map(({ value, label }) => {
        const option = doc.createElement("option");
        option.value = value;
        option.textContent = label;
        return option;
      }),
    );
    select.value = selected;
  };
  const drawPause = () => {
    const paused = Boolean(model.get("_paused"));
    pause.hidden = Boolean(model.get("_readonly"));
    pause.textContent = paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(paused));
    el.classList.toggle("calwatch-paused", paused);
    drawPending();
  };
  const drawPending = () => {
    const paused = Boolean(model.get("_paused"));
    pending.textContent =
      paused ? ` · paused${pendingCount > 0 ? `, ${count(pendingCount, "update", "updates")} queued` : ""}` : "";
  };
  const drawStatus = () => {
    statusText.textContent = formatStatus(model.get("_status"));
    const notices = model.get("_notices") ?? [];
    statusText.title = notices.join("\n"); // the rules applied, in words, on hover
  };
  const drawError = () => {
    const messages = [model.get("_error") ?? "", ...localErrors.values()].filter((m) => m !== "");
    error.textContent = messages.join("\n");
    error.hidden = messages.length === 0;
  };

  const onSelect = () => {
    model.set("_selected", select.value);
    model.save_changes();
  };
  const onPause = () => {
    model.set("_paused", !model.get("_paused"));
    model.save_changes();
  };
  select.addEventListener("change", onSelect);
  pause.addEventListener("click", onPause);

  const listeners: [string, () => void][] = [
    ["change:_title", drawTitle],
    ["change:_calibrators", drawPicker],
    ["change:_selected", drawPicker],
    ["change:_paused", drawPause],
    ["change:_status", drawStatus],
    ["change:_notices", drawStatus],
    ["change:_error", drawError],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);
  drawTitle();
  drawPicker();
  drawPause();
  drawStatus();
  drawError();

  return {
    el,
    setPending(n) {
      pendingCount = n;
      drawPending();
    },
    setLocalError(source, message) {
      if (message === "") localErrors.delete(source);
      else localErrors.set(source, message);
      drawError();
    },
    dispose() {
      for (const [event, fn] of listeners) model.off(event, fn);
      select.removeEventListener("change", onSelect);
      pause.removeEventListener("click", onPause);
    },
  };
}
