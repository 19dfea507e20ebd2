// anywidget entry of calwatch.widget.MonitorWidget (protocol: docs/widget-protocol.md).
//
// Each rendered view keeps its own browser-only state: a view id, the StreamBuffer ordering the
// kernel's messages, the RowStore of the rows handed to the charts and the Vega charts.
// Kernel-synced state is only read from / written to the model (types in model.ts). The header
// (controls.ts), the dashboard controls (dashcontrols.ts), the shift warnings (alerts.ts), the
// notes (notes.ts) and the row table (rowtable.ts) follow their own traits / messages.
//
// Layout: a timeline (brush + notes) above tabs of sections (`_sections`); the chart kinds and
// panels of the other tabs are hidden and inactive: they take resets at once but defer upserts
// and signal changes until their tab is shown (then catch up from the RowStore once), so an
// update costs the visible charts only. The brush sets the signals batch_lo / batch_hi of every
// chart of this view at once and `_batch_range` (the kernel and other views) once it settles; a
// `_batch_range` set elsewhere (another view, Python, the clear button) is drawn as this view's
// brush rectangle too, without being written back.
//
// Updates reach the charts one apply at a time, in a task after the messages that brought them:
// everything accepted meanwhile (messages already received, those arriving while an apply is
// being rendered, a resume's queue) is merged into a single update (mergeUpdates), then every
// chart gets it as one changeset + runAsync, concurrently. A burst costs a few applies, not one
// per message. After an apply the page stays idle as long as the apply took (at most 0.5 s:
// idleGapMs) before the next one, so a fast stream never takes all of its time.

import type { AnyModel, Initialize, Render } from "@anywidget/types";
import { createAlerts } from "./alerts";
import { drawCards } from "./cards";
import { Chart, isDarkTheme, type Renderer } from "./charts";
import { createControls } from "./controls";
import { createDashControls } from "./dashcontrols";
import { createHealth } from "./health";
import {
  type KeyedRow,
  parseKernelMessage,
  parseRowsMessage,
  type ReplayRequest,
  type Section,
  type SliceFilterMessage,
  type WidgetModel,
} from "./model";
import { createNotes } from "./notes";
import { createRowTable } from "./rowtable";
import { type AcceptedUpdate, type ChartUpdate, mergeUpdates, RowStore, StreamBuffer } from "./stream";
import css from "./widget.css" with { type: "text" };

const STYLE_ID = "calwatch-widget-style";

/** Adds the widget's stylesheet to `doc` once. */
export function injectStyles(doc: Document): void {
  if (doc.getElementById(STYLE_ID)) return;
  const style = doc.createElement("style");
  style.id = STYLE_ID;
  style.textContent = css;
  doc.head.append(style);
}

function newViewId(): string {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes); // available outside secure contexts, unlike randomUUID
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function message(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

export interface ViewOptions {
  renderer?: Renderer;
  viewId?: string;
}

/** `globalThis.__calwatchUpdateTimings`: ms of each whole update (every active chart), for tests. */
export function updateTimingsSink(): number[] {
  const g = globalThis as { __calwatchUpdateTimings?: unknown };
  if (!Array.isArray(g.__calwatchUpdateTimings)) g.__calwatchUpdateTimings = [];
  return g.__calwatchUpdateTimings as number[];
}

/** One update's way from the kernel to the screen (ms since the kernel began computing it). */
export interface LatencySample {
  seq: number;
  /** Until every active chart of the view had rendered it (its changeset + runAsync resolved). */
  applied_ms: number;
  /** Until the next animation frame after that: the frame that paints it. */
  frame_ms: number;
}

const MAX_LATENCIES = 100_000;

/** `globalThis.__calwatchLatencies`: kernel → screen latency of each upsert that carried `t0`, for tests. */
export function latencySink(): LatencySample[] {
  const g = globalThis as { __calwatchLatencies?: unknown };
  if (!Array.isArray(g.__calwatchLatencies)) g.__calwatchLatencies = [];
  return g.__calwatchLatencies as LatencySample[];
}

/** Wall-clock time in ms since the Unix epoch (the kernel's clock, on the same machine). */
/** The most idle time the page keeps between two applies of the stream (ms). */
export const MAX_IDLE_GAP_MS = 500;

/**
 * Idle time before the next apply of the stream, after one that took `applyMs`: as long as it
 * took (so drawing takes at most half the page's time), at most MAX_IDLE_GAP_MS.
 */
export function idleGapMs(applyMs: number): number {
  return Number.isFinite(applyMs) && applyMs > 0 ? Math.min(applyMs, MAX_IDLE_GAP_MS) : 0;
}

export function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

/** Section of charts a kernel without `_sections` gets (everything in one tab). */
const ALL_CHARTS = "Charts";
const OVERVIEW = "Overview";

interface Item {
  name: string;
  section: string;
  el: HTMLElement;
  empty: HTMLElement;
  chart: Chart;
}

/**
 * DOM order of the chart kinds and panels: the kinds in `_chart_order`; each panel (a name in a
 * section but not a kind) right after the first kind of its section, else at the end.
 */
export function itemOrder(order: readonly string[], sections: readonly Section[]): { name: string; section: string; panel: boolean }[] {
  const sectionOf = new Map<string, string>();
  for (const s of sections) for (const name of s.charts) if (!sectionOf.has(name)) sectionOf.set(name, s.name);
  const fallback = sections.find((s) => s.name !== OVERVIEW)?.name ?? sections[0]?.name ?? ALL_CHARTS;
  const kinds = new Set(order);
  const out = order.map((name) => ({ name, section: sectionOf.get(name) ?? fallback, panel: false }));
  for (const s of sections) {
    for (const name of s.charts) {
      if (kinds.has(name) || name === TIMELINE || out.some((o) => o.name === name)) continue;
      const item = { name, section: s.name, panel: true };
      // Before the first chart the section lists after it (the Shift lanes above the evidence),
      // else after the section's last item.
      const later = new Set(s.charts.slice(s.charts.indexOf(name) + 1));
      const before = out.findIndex((o) => o.section === s.name && later.has(o.name));
      if (before >= 0) out.splice(before, 0, item);
      else {
        const last = out.map((o) => o.section).lastIndexOf(s.name);
        if (last < 0) out.push(item);
        else out.splice(last + 1, 0, item);
      }
    }
  }
  return out;
}

/**
 * Each batch's name by index, from the `batches` rows (a pooled bucket is not one batch: skipped);
 * null where a batch has no name but its index, and null overall when no batch has a name.
 * Batch axes label a named batch by its name (the `batch_names` signal).
 */
export function namedBatches(rows: Iterable<KeyedRow>): (string | null)[] | null {
  const names: (string | null)[] = [];
  let any = false;
  for (const row of rows) {
    const { batch, name } = row;
    if (typeof batch !== "number" || typeof name !== "string" || name === String(batch)) continue;
    if (typeof row.n_batches === "number" && row.n_batches !== 1) continue;
    while (names.length < batch) names.push(null);
    names[batch] = name;
    any = true;
  }
  return any ? names.map((n) => n ?? null) : null;
}

/** Whether a dataset has a row whose `field` is set (an empty state's condition). */
function hasValue(rows: Iterable<KeyedRow>, field: string): boolean {
  for (const row of rows) {
    const v = row[field];
    if (v !== null && v !== undefined && v !== 0) return true;
  }
  return false;
}

const TIMELINE = "timeline";
/** The Shift view's lanes panel (calwatch.views.dashboard.shift_lanes_spec). */
const SHIFT_LANES = "shift_lanes";
/** The Slices view's ranking panel (calwatch.views.where_it_fails). */
const WHERE_IT_FAILS = "where_it_fails";
/** The Slices view's coverage-by-value panel. */
const SLICE_VALUES = "slice_values";

/** Renders one view of the widget into `el`; returns its cleanup. */
export function renderView(
  model: AnyModel<WidgetModel>,
  el: HTMLElement,
  options: ViewOptions = {},
): () => void {
  const doc = el.ownerDocument;
  injectStyles(doc);
  const viewId = options.viewId ?? newViewId();
  const root = doc.createElement("div");
  root.className = "calwatch-widget";
  root.dataset.viewId = viewId;
  const controls = createControls(model, doc);
  const dash = createDashControls(model, doc);
  // Shift warnings under the header; they follow change:_warnings themselves.
  const alerts = createAlerts(model, doc, { onError: (m) => controls.setLocalError("warnings", m) });
  // The health strip: a chip per calibrator (promise, state, sparkline), from the `health` dataset.
  const health = createHealth(doc);
  const timelineEl = doc.createElement("div");
  timelineEl.className = "calwatch-timeline";
  const timelineCaption = doc.createElement("div");
  timelineCaption.className = "calwatch-timeline-caption";
  timelineCaption.textContent = "Timeline: drag to show a range of batches in every panel; click a batch for its rows";
  const timelineVega = doc.createElement("div");
  timelineVega.className = "calwatch-vega";
  timelineEl.append(timelineCaption, timelineVega);
  const notes = createNotes(model, doc);
  /** The slice the row table is filtered to ("" = none): the coverage and set-size charts draw its series too. */
  let sliceFilter = "";
  const onSlice = (slice: string) => {
    sliceFilter = slice;
    root.dataset.sliceFilter = slice;
    for (const item of items) void item.chart.setSignals(filterSignals());
    // The kernel computes its coverage and set size per window batch (`slice_coverage`) and keeps them current.
    const msg: SliceFilterMessage = { kind: "slice-filter", view: viewId, slice_filter: slice };
    model.send(msg);
  };
  const rowTable = createRowTable(model, viewId, doc, { onNote: (batch) => notes.pinTo(batch), onSlice });
  const tabs = doc.createElement("div");
  tabs.className = "calwatch-tabs";
  tabs.setAttribute("role", "tablist");
  const chartsEl = doc.createElement("div");
  chartsEl.className = "calwatch-charts";
  const cards = doc.createElement("div");
  cards.className = "calwatch-cards";
  cards.dataset.section = OVERVIEW;
  // At a glance first: header, health strip, one line per warning; then the controls and panels.
  root.append(controls.el, health.el, alerts.el, dash.el, timelineEl, rowTable.el, notes.el, tabs, chartsEl);
  el.append(root);

  const stream = new StreamBuffer(viewId, { paused: Boolean(model.get("_paused")) });
  /** The rows handed to the charts so far (what a rebuilt chart starts from). */
  const store = new RowStore();
  let storeSeq: number | null = null;
  let items: Item[] = [];
  let timeline: Chart | null = null;
  let activeSection = "";
  let dark = isDarkTheme(doc);
  let shownSeq = Number.NEGATIVE_INFINITY;
  /** The batch range applied in this view (from its own brush, or the kernel's _batch_range). */
  let range: number[] = [...(model.get("_batch_range") ?? [])];
  const updateTimings = updateTimingsSink();
  const latencies = latencySink();
  /** When the kernel began each upsert received and not yet rendered, by seq. */
  const started = new Map<number, number>();
  const reportError = (source: string, prefix = "") => (error: unknown) =>
    controls.setLocalError(source, prefix + message(error));

  const rangePair = (): [number, number] | null => {
    const [lo, hi] = range;
    return lo === undefined || hi === undefined ? null : [lo, hi];
  };
  const allCharts = () => [...(timeline === null ? [] : [timeline]), ...items.map((i) => i.chart)];
  /** The detector whose evidence the Shift view shows alone ("": every detector), picked on its lane. */
  let detectorPick = "";
  /** Batch names for the batch axes (`namedBatches`), and their text, to set them only on a change. */
  let batchNames: (string | null)[] | null = null;
  let batchNamesText = "null";
  const filterSignals = (): Record<string, unknown> => ({
    batch_lo: range.length === 2 ? range[0] : null,
    batch_hi: range.length === 2 ? range[1] : null,
    class_filter: model.get("_class_filter") ?? "",
    detector_pick: detectorPick,
    slice_column: sliceColumn,
    slice_filter: sliceFilter,
    batch_names: batchNames,
  });
  /** The slice column whose values the Slices view shows ("": the column of the weakest slice). */
  let sliceColumn = "";
  /** A click on a lane picks its detector; a second click on it shows every detector again. */
  const pickDetector = (datum: Record<string, unknown>) => {
    if (typeof datum.detector !== "string") return;
    detectorPick = detectorPick === datum.detector ? "" : datum.detector;
    root.dataset.detectorPick = detectorPick;
    for (const item of items) void item.chart.setSignals(filterSignals());
  };
  /** A click on a slice picks its column (a pair's first one) for the coverage-by-value panel. */
  const pickSliceColumn = (datum: Record<string, unknown>) => {
    if (typeof datum.by !== "string") return;
    sliceColumn = datum.by.split(" & ")[0] ?? "";
    root.dataset.sliceColumn = sliceColumn;
    for (const item of items) void item.chart.setSignals(filterSignals());
  };
  /**
   * A click on a slice (either Slices panel) picks its column as above and filters the row table
   * to its rows (a second click on it shows every row again); a report, without rows, only picks.
   */
  const pickSlice = (datum: Record<string, unknown>) => {
    pickSliceColumn(datum);
    if (typeof datum.slice === "string") rowTable.filterSlice(datum.slice);
  };
  const snapshot = () => (storeSeq === null ? null : store.snapshot(storeSeq));

  const markApplied = (update: ChartUpdate, replaySeq: number | null) => {
    // data-applied-seq only ever grows (a replay older than upserts already shown does not move
    // it back: those upserts are applied again in the same update). Row counts always follow.
    if (update.seq > shownSeq) {
      shownSeq = update.seq;
      root.dataset.appliedSeq = String(update.seq);
    }
    if (replaySeq !== null) root.dataset.replaySeq = String(replaySeq);
    for (const [name, n] of Object.entries(update.counts)) root.setAttribute(`data-rows-${name}`, String(n));
  };

  /**
   * Panels that need an action before they show anything: the what-if α panel, hidden until the
   * α slider is used (or what-if rows exist), and always in a report (it needs a kernel).
   */
  const waitsForAction = (item: Item): boolean =>
    item.name === "what_if" &&
    (Boolean(model.get("_readonly")) || ((model.get("_alpha") ?? null) === null && store.count("what_if") === 0));

  /** Shows the items of the active section (but those waiting for an action); activates them. */
  const showItems = () => {
    for (const item of items) {
      const shown = item.section === activeSection && !waitsForAction(item);
      if (item.el.hidden === !shown && item.el.dataset.shown !== undefined) continue;
      item.el.hidden = !shown;
      item.el.dataset.shown = String(shown);
      if (shown) void item.chart.activate();
      else item.chart.deactivate();
    }
  };

  /** Cards, the health strip, notes and empty states follow the store after every applied update. */
  const drawDerived = () => {
    controls.setLocalError("health", health.draw(store.rows("health"), model.get("_calibrators") ?? []));
    drawCards(cards, store.rows("overview"), model.get("_calibrators") ?? [], doc, health.states());
    showItems();
    cards.hidden = activeSection !== OVERVIEW || cards.childElementCount === 0;
    notes.draw(store.rows("notes"));
    const rules = model.get("_empty_states") ?? {};
    const readonly = Boolean(model.get("_readonly"));
    for (const item of items) {
      const rule = rules[item.name];
      let text = "";
      if (rule !== undefined && !hasValue(store.values(rule.dataset), rule.field)) text = rule.message;
      if (readonly && item.name === "what_if") text = "The what-if α needs a live kernel: not available in a report.";
      item.empty.textContent = text;
      item.empty.hidden = text === "";
      item.el.classList.toggle("calwatch-is-empty", text !== "");
      // No rows at all (before the first batch): no axes of nothing (a NaN tick, "0.000000"),
      // only the sentence; with rows but no value yet (no labels), the faded chart stays.
      const blank = text !== "" && rule !== undefined && store.rows(rule.dataset).length === 0;
      item.el.classList.toggle("calwatch-is-blank", blank);
    }
    // The timeline brushes batches: before the first one it has nothing to show.
    timelineEl.hidden = timeline === null || store.rows(TIMELINE).length === 0;
    const names = namedBatches(store.values("batches"));
    const namesText = JSON.stringify(names);
    if (namesText !== batchNamesText) {
      batchNames = names;
      batchNamesText = namesText;
      for (const item of items) void item.chart.setSignals({ batch_names: names });
      if (timeline !== null) void timeline.setSignals({ batch_names: names });
    }
  };

  const setSection = (name: string) => {
    activeSection = name;
    root.dataset.section = name;
    for (const button of tabs.querySelectorAll<HTMLButtonElement>("button.calwatch-tab")) {
      const selected = button.dataset.section === name;
      button.setAttribute("aria-selected", String(selected));
      button.tabIndex = selected ? 0 : -1;
    }
    cards.hidden = name !== OVERVIEW || cards.childElementCount === 0;
    for (const item of items) delete item.el.dataset.shown;
    showItems();
  };

  const openRows = (batch: number) => rowTable.open(batch);
  let brushTimer: ReturnType<typeof setTimeout> | null = null;
  /** The user brushed this view's timeline (a brush drawn from `_batch_range` is not reported). */
  const onBrush = (next: [number, number] | null) => {
    const nextRange = next === null ? [] : [...next];
    if (JSON.stringify(nextRange) === JSON.stringify(range)) return;
    range = nextRange;
    for (const item of items) void item.chart.setSignals(filterSignals());
    // The kernel (and the other views) follow once the drag settles.
    if (brushTimer !== null) clearTimeout(brushTimer);
    brushTimer = setTimeout(() => {
      brushTimer = null;
      const current = model.get("_batch_range") ?? [];
      if (JSON.stringify(current) === JSON.stringify(range)) return;
      model.set("_batch_range", [...range]);
      model.save_changes();
    }, 150);
  };

  const buildCharts = () => {
    for (const chart of allCharts()) chart.finalize();
    for (const item of items) controls.setLocalError(`chart ${item.name}`, "");
    items = [];
    timeline = null;
    chartsEl.replaceChildren(cards);
    timelineVega.replaceChildren();
    const specs = model.get("_specs") ?? {};
    const order = model.get("_chart_order") ?? [];
    const sections = model.get("_sections") ?? [{ name: ALL_CHARTS, charts: [...order] }];
    const missing: string[] = [];
    const chartOptions = (name: string, active: boolean) => ({
      renderer: options.renderer ?? "svg",
      dark,
      calibrator: model.get("_selected") ?? "",
      signals: filterSignals(),
      active,
      snapshot,
      // The lanes pick a detector; elsewhere a click on a batch opens its rows.
      ...(name === SHIFT_LANES
        ? { onPick: pickDetector }
        : name === WHERE_IT_FAILS || name === SLICE_VALUES
          ? { onPick: pickSlice }
          : { onBatchClick: openRows }),
      onError: reportError(`chart ${name}`, `Chart "${name}": `),
    });
    const names = new Set(sections.map((s) => s.name));
    if (!names.has(activeSection)) activeSection = sections[0]?.name ?? ALL_CHARTS;
    for (const { name, section, panel } of itemOrder(order, sections)) {
      const spec = specs[name];
      if (spec === undefined) {
        missing.push(name);
        continue;
      }
      const div = doc.createElement("div");
      // Chart kinds of calwatch.views.charts are `div.calwatch-chart[data-chart]`; the dashboard's own
      // panels (recomputed from the window) `div.calwatch-panel[data-panel]`.
      div.className = panel ? "calwatch-panel" : "calwatch-chart";
      if (panel) div.dataset.panel = name;
      else div.dataset.chart = name;
      div.dataset.section = section;
      const empty = doc.createElement("p");
      empty.className = "calwatch-empty";
      empty.hidden = true;
      const target = doc.createElement("div");
      target.className = "calwatch-vega";
      div.append(empty, target);
      chartsEl.append(div);
      const active = section === activeSection;
      const chart = new Chart(target, spec, chartOptions(name, active));
      if (storeSeq !== null) void chart.apply(store.snapshot(storeSeq));
      items.push({ name, section, el: div, empty, chart });
    }
    const timelineSpec = specs[TIMELINE];
    if (timelineSpec !== undefined) {
      timeline = new Chart(timelineVega, timelineSpec, {
        ...chartOptions(TIMELINE, true),
        signals: {},
        clickByX: true,
        onBrush,
      });
      if (storeSeq !== null) void timeline.apply(store.snapshot(storeSeq));
      // The brush rectangle of the range in force (brushed elsewhere, or before a rebuild).
      if (range.length === 2) void timeline.setBrush(rangePair());
    }
    timelineEl.hidden = timelineSpec === undefined;
    tabs.replaceChildren(
      ...sections.map((s) => {
        const button = doc.createElement("button");
        button.type = "button";
        button.className = "calwatch-tab";
        button.setAttribute("role", "tab");
        button.dataset.section = s.name;
        button.textContent = s.name;
        return button;
      }),
    );
    tabs.hidden = sections.length < 2;
    setSection(activeSection);
    drawDerived();
    controls.setLocalError("specs", missing.length > 0 ? `No spec for chart(s): ${missing.join(", ")}` : "");
  };

  let disposed = false;
  let rebuildScheduled = false;
  const scheduleRebuild = () => {
    // _specs, _chart_order and _sections usually change together: rebuild once.
    if (rebuildScheduled) return;
    rebuildScheduled = true;
    queueMicrotask(() => {
      rebuildScheduled = false;
      if (!disposed) buildCharts();
    });
  };

  /** Accepted updates not yet handed to the charts. */
  const waiting: AcceptedUpdate[] = [];
  let applying = false;
  let flushTimer: ReturnType<typeof setTimeout> | null = null;
  /** When the last apply ended and how long it took (ms, performance.now()). */
  let lastApplyEnd = Number.NEGATIVE_INFINITY;
  let lastApplyMs = 0;
  /**
   * Hands everything waiting to the charts as one update. Whatever arrives meanwhile waits for
   * the next one, which starts no sooner than the last apply took (idleGapMs): a stream that
   * arrives faster than the charts draw gets at most half the page's time, and the rest is left
   * to the user's input, the notebook and the kernel's other messages.
   */
  const flush = async () => {
    flushTimer = null;
    if (waiting.length === 0 || disposed) return;
    applying = true;
    const began = performance.now();
    try {
      const merged = mergeUpdates(waiting.splice(0));
      if (merged === null) return;
      const replaySeq = stream.replaySeq;
      const update = store.apply(merged);
      storeSeq = update.seq;
      const start = performance.now();
      await Promise.all(allCharts().map((chart) => chart.apply(update)));
      updateTimings.push(performance.now() - start);
      if (updateTimings.length > 100_000) updateTimings.splice(0, updateTimings.length - 100_000);
      if (!disposed) {
        markApplied(update, replaySeq);
        drawDerived();
        recordLatencies(update.seq);
      }
    } finally {
      applying = false;
      lastApplyEnd = performance.now();
      lastApplyMs = lastApplyEnd - began;
      scheduleFlush();
    }
  };
  /** Starts the next apply in a task of its own, after the idle gap the last one asks for. */
  const scheduleFlush = () => {
    if (applying || flushTimer !== null || waiting.length === 0 || disposed) return;
    const wait = idleGapMs(lastApplyMs) - (performance.now() - lastApplyEnd);
    flushTimer = setTimeout(() => void flush().catch(reportError("stream")), Math.max(0, wait));
  };
  /** Latency of every upsert up to `seq` that carried the kernel's start time (now rendered). */
  const recordLatencies = (seq: number) => {
    const shown: [number, number][] = [];
    for (const [s, t0] of started) if (s <= seq) shown.push([s, t0]);
    if (shown.length === 0) return;
    const applied = epochNow();
    for (const [s] of shown) started.delete(s);
    const painted = () => {
      const frame = epochNow();
      for (const [s, t0] of shown) latencies.push({ seq: s, applied_ms: applied - t0, frame_ms: frame - t0 });
      if (latencies.length > MAX_LATENCIES) latencies.splice(0, latencies.length - MAX_LATENCIES);
    };
    if (typeof requestAnimationFrame === "function") requestAnimationFrame(painted);
    else painted();
  };

  const applyUpdates = (updates: AcceptedUpdate[]) => {
    waiting.push(...updates);
    // Apply in a task of its own, not in the message's: Vega's changeset + runAsync settle in
    // microtasks, so applying right away would render every message on its own before the
    // browser even delivers the next one (kernel messages already received wait in the task
    // queue). Deferring lets those arrive first and be merged into the same update.
    scheduleFlush();
    controls.setPending(stream.pending);
  };

  const onMessage = (msg: unknown) => {
    const rows = parseRowsMessage(msg);
    if (rows !== null) {
      rowTable.receive(rows);
      return;
    }
    let parsed;
    try {
      parsed = parseKernelMessage(msg);
    } catch (error) {
      reportError("stream")(error);
      return;
    }
    if (parsed === null) return;
    if (parsed.kind === "upsert" && parsed.t0 !== undefined && started.size < MAX_LATENCIES) {
      started.set(parsed.seq, parsed.t0);
    }
    applyUpdates(stream.receive(parsed));
  };
  const onPaused = () => applyUpdates(stream.setPaused(Boolean(model.get("_paused"))));
  const onSelected = () => {
    const selected = model.get("_selected") ?? "";
    for (const chart of allCharts()) void chart.setCalibrator(selected);
  };
  const onFilters = () => {
    const next = model.get("_batch_range") ?? [];
    if (JSON.stringify(next) !== JSON.stringify(range)) {
      // Set elsewhere (another view, the kernel, the clear button): draw it on this timeline.
      range = [...next];
      void timeline?.setBrush(rangePair());
    }
    for (const item of items) void item.chart.setSignals(filterSignals());
    root.dataset.batchRange = range.join("-");
    root.dataset.classFilter = model.get("_class_filter") ?? "";
  };
  const onTabClick = (event: Event) => {
    const target = event.target;
    if (target instanceof HTMLButtonElement && target.dataset.section !== undefined) setSection(target.dataset.section);
  };
  tabs.addEventListener("click", onTabClick);

  const listeners: [string, (...args: unknown[]) => void][] = [
    ["msg:custom", onMessage],
    ["change:_paused", onPaused],
    ["change:_selected", onSelected],
    ["change:_batch_range", onFilters],
    ["change:_class_filter", onFilters],
    ["change:_specs", scheduleRebuild],
    ["change:_chart_order", scheduleRebuild],
    ["change:_sections", scheduleRebuild],
    ["change:_calibrators", drawDerived],
    ["change:_alpha", showItems],
    ["change:_empty_states", drawDerived],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);

  // JupyterLab theme switches: re-embed with the other Vega theme (data comes from the store).
  const themeObserver =
    typeof MutationObserver !== "undefined" && doc.body
      ? new MutationObserver(() => {
          if (isDarkTheme(doc) === dark) return;
          dark = isDarkTheme(doc);
          buildCharts();
        })
      : null;
  if (doc.body) themeObserver?.observe(doc.body, { attributes: true, attributeFilter: ["data-jp-theme-light"] });

  buildCharts();
  onFilters();
  const request: ReplayRequest = { kind: "replay-request", view: viewId };
  model.send(request);

  return () => {
    disposed = true;
    if (flushTimer !== null) clearTimeout(flushTimer);
    if (brushTimer !== null) clearTimeout(brushTimer);
    for (const [event, fn] of listeners) model.off(event, fn);
    tabs.removeEventListener("click", onTabClick);
    themeObserver?.disconnect();
    controls.dispose();
    dash.dispose();
    alerts.dispose();
    notes.dispose();
    rowTable.dispose();
    for (const chart of allCharts()) chart.finalize();
    items = [];
    timeline = null;
    root.remove();
  };
}

export default () => {
  const initialize: Initialize<WidgetModel> = () => {
    if (typeof document !== "undefined") injectStyles(document);
  };
  const render: Render<WidgetModel> = ({ model, el }) => renderView(model, el);
  return { initialize, render };
};
export { type LiveView, renderLive, renderStatic, StaticModel } from "./static";
