// anywidget entry of calwatch.widget.MonitorWidget (protocol: docs/widget-protocol.md).
//
// Each rendered view keeps its own browser-only state: a view id, the StreamBuffer ordering the
// kernel's messages, the RowStore of the rows handed to the charts and the Vega charts.
// Kernel-synced state is only read from / written to the model (types in model.ts). The header
// (controls.ts) and the shift warnings under it (alerts.ts) follow their own traits.
//
// Updates reach the charts one apply at a time, in a task after the messages that brought them:
// everything accepted meanwhile (messages already received, those arriving while an apply is
// being rendered, a resume's queue) is merged into a single update (mergeUpdates), then every
// chart gets it as one changeset + runAsync, concurrently. A burst costs a few applies, not one
// per message.

import type { AnyModel, Initialize, Render } from "@anywidget/types";
import { createAlerts } from "./alerts";
import { Chart, isDarkTheme, type Renderer } from "./charts";
import { createControls } from "./controls";
import { parseKernelMessage, type ReplayRequest, type WidgetModel } from "./model";
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
  // Shift warnings under the header; they follow change:_warnings themselves.
  const alerts = createAlerts(model, doc, { onError: (m) => controls.setLocalError("warnings", m) });
  const chartsEl = doc.createElement("div");
  chartsEl.className = "calwatch-charts";
  root.append(controls.el, alerts.el, chartsEl);
  el.append(root);

  const stream = new StreamBuffer(viewId, { paused: Boolean(model.get("_paused")) });
  /** The rows handed to the charts so far (what a rebuilt chart starts from). */
  const store = new RowStore();
  let storeSeq: number | null = null;
  let charts: Chart[] = [];
  let dark = isDarkTheme(doc);
  let shownSeq = Number.NEGATIVE_INFINITY;
  const reportError = (source: string, prefix = "") => (error: unknown) =>
    controls.setLocalError(source, prefix + message(error));

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

  const buildCharts = () => {
    for (const chart of charts) {
      chart.finalize();
      controls.setLocalError(`chart ${chart.el.dataset.chart}`, "");
    }
    charts = [];
    chartsEl.replaceChildren();
    const specs = model.get("_specs") ?? {};
    const missing: string[] = [];
    for (const name of model.get("_chart_order") ?? []) {
      const spec = specs[name];
      if (spec === undefined) {
        missing.push(name);
        continue;
      }
      const div = doc.createElement("div");
      div.className = "calwatch-chart";
      div.dataset.chart = name;
      chartsEl.append(div);
      const chart = new Chart(div, spec, {
        renderer: options.renderer ?? "svg",
        dark,
        calibrator: model.get("_selected") ?? "",
        onError: reportError(`chart ${name}`, `Chart "${name}": `),
      });
      if (storeSeq !== null) void chart.apply(store.snapshot(storeSeq));
      charts.push(chart);
    }
    controls.setLocalError("specs", missing.length > 0 ? `No spec for chart(s): ${missing.join(", ")}` : "");
  };

  let disposed = false;
  let rebuildScheduled = false;
  const scheduleRebuild = () => {
    // _specs and _chart_order usually change together: rebuild once.
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
  /** Hands everything waiting to the charts as one update; repeats while more arrived meanwhile. */
  const flush = async () => {
    flushTimer = null;
    applying = true;
    try {
      while (waiting.length > 0 && !disposed) {
        const merged = mergeUpdates(waiting.splice(0));
        if (merged === null) break;
        const replaySeq = stream.replaySeq;
        const update = store.apply(merged);
        storeSeq = update.seq;
        await Promise.all(charts.map((chart) => chart.apply(update)));
        if (!disposed) markApplied(update, replaySeq);
      }
    } finally {
      applying = false;
    }
  };
  const applyUpdates = (updates: AcceptedUpdate[]) => {
    waiting.push(...updates);
    // Apply in a task of its own, not in the message's: Vega's changeset + runAsync settle in
    // microtasks, so applying right away would render every message on its own before the
    // browser even delivers the next one (kernel messages already received wait in the task
    // queue). Deferring lets those arrive first and be merged into the same update.
    if (!applying && flushTimer === null && waiting.length > 0) {
      flushTimer = setTimeout(() => void flush().catch(reportError("stream")), 0);
    }
    controls.setPending(stream.pending);
  };

  const onMessage = (msg: unknown) => {
    let parsed;
    try {
      parsed = parseKernelMessage(msg);
    } catch (error) {
      reportError("stream")(error);
      return;
    }
    if (parsed !== null) applyUpdates(stream.receive(parsed));
  };
  const onPaused = () => applyUpdates(stream.setPaused(Boolean(model.get("_paused"))));
  const onSelected = () => {
    const selected = model.get("_selected") ?? "";
    for (const chart of charts) void chart.setCalibrator(selected);
  };

  const listeners: [string, (...args: unknown[]) => void][] = [
    ["msg:custom", onMessage],
    ["change:_paused", onPaused],
    ["change:_selected", onSelected],
    ["change:_specs", scheduleRebuild],
    ["change:_chart_order", scheduleRebuild],
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
  const request: ReplayRequest = { kind: "replay-request", view: viewId };
  model.send(request);

  return () => {
    disposed = true;
    if (flushTimer !== null) clearTimeout(flushTimer);
    for (const [event, fn] of listeners) model.off(event, fn);
    themeObserver?.disconnect();
    controls.dispose();
    alerts.dispose();
    for (const chart of charts) chart.finalize();
    charts = [];
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
export { renderStatic, StaticModel } from "./static";
