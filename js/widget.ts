// anywidget entry of calwatch.widget.MonitorWidget (protocol: docs/widget-protocol.md).
//
// Each rendered view keeps its own browser-only state: a view id, the StreamBuffer ordering the
// kernel's messages, the RowStore of current rows and the Vega charts. Kernel-synced state is
// only read from / written to the model (types in model.ts).

import type { AnyModel, Initialize, Render } from "@anywidget/types";
import { Chart, isDarkTheme, type Renderer } from "./charts";
import { createControls } from "./controls";
import { parseKernelMessage, type ReplayRequest, type WidgetModel } from "./model";
import { type AcceptedUpdate, type ChartUpdate, RowStore, StreamBuffer } from "./stream";
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
  const chartsEl = doc.createElement("div");
  chartsEl.className = "calwatch-charts";
  root.append(controls.el, chartsEl);
  el.append(root);

  const stream = new StreamBuffer(viewId, { paused: Boolean(model.get("_paused")) });
  const store = new RowStore();
  let charts: Chart[] = [];
  let dark = isDarkTheme(doc);
  let shownSeq = Number.NEGATIVE_INFINITY;
  const reportError = (source: string, prefix = "") => (error: unknown) =>
    controls.setLocalError(source, prefix + message(error));

  const markApplied = (update: ChartUpdate) => {
    if (update.seq < shownSeq) return;
    shownSeq = update.seq;
    root.dataset.appliedSeq = String(update.seq);
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
      if (stream.appliedSeq !== null) void chart.apply(store.snapshot(stream.appliedSeq));
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

  const applyUpdates = (updates: AcceptedUpdate[]) => {
    for (const accepted of updates) {
      const update = store.apply(accepted);
      void Promise.all(charts.map((chart) => chart.apply(update))).then(() => markApplied(update));
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
    for (const [event, fn] of listeners) model.off(event, fn);
    themeObserver?.disconnect();
    controls.dispose();
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
