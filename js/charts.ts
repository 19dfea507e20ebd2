// One Vega view per chart: embedding, streaming changesets into named datasets, the calibrator
// signal and container-width tracking. Browser-only state (the Vega views themselves).

import { changeset, Error as LogError } from "vega";
import embed, { type EmbedOptions, type Result, type VisualizationSpec } from "vega-embed";
import type { KeyedRow, VegaLiteSpec } from "./model";
import type { ChartUpdate } from "./stream";

export type Renderer = "svg" | "canvas" | "none";

/** Value of the Vega signal `calibrator` for a picked calibrator ("" = all). */
export const ALL_CALIBRATORS = "(all)";
export function calibratorSignalValue(selected: string): string {
  return selected === "" ? ALL_CALIBRATORS : selected;
}

/** True when JupyterLab shows a dark theme. */
export function isDarkTheme(doc: Document = document): boolean {
  return doc.body?.dataset.jpThemeLight === "false";
}

const MAX_TIMINGS = 100_000;

/** `globalThis.__calwatchTimings`: ms of each changeset + runAsync, for tests and benchmarks. */
export function timingsSink(): number[] {
  const g = globalThis as { __calwatchTimings?: unknown };
  if (!Array.isArray(g.__calwatchTimings)) g.__calwatchTimings = [];
  return g.__calwatchTimings as number[];
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

const CONCAT_KEYS = ["hconcat", "vconcat", "concat"] as const;

/** Names of the datasets a Vega-Lite spec reads (`{"data": {"name": ...}}` anywhere in it). */
export function datasetNames(spec: unknown): Set<string> {
  const names = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      node.forEach(walk);
      return;
    }
    if (!isRecord(node)) return;
    for (const [k, v] of Object.entries(node)) {
      if (k === "data" && isRecord(v) && typeof v.name === "string") names.add(v.name);
      walk(v);
    }
  };
  walk(spec);
  return names;
}

/**
 * Copy of `spec` ready to embed in a resizable container: `width: "container"` (single and
 * layered views without an explicit width) and `autosize.resize`, without which Vega keeps the
 * layout computed from the (empty) initial data.
 */
export function prepareSpec(spec: VegaLiteSpec): VegaLiteSpec {
  const out = structuredClone(spec);
  const concat = CONCAT_KEYS.some((k) => k in out);
  const autosize = out.autosize;
  if (typeof autosize === "string") out.autosize = { type: autosize, resize: true };
  else if (isRecord(autosize)) out.autosize = { ...autosize, resize: true };
  else out.autosize = concat ? { type: "pad", resize: true } : { type: "fit-x", contains: "padding", resize: true };
  if (!concat && out.width === undefined) out.width = "container";
  hoistLayerParams(out);
  return out;
}

/**
 * Vega-Lite drops variable params (no `select`) declared inside `layer` children, so an
 * expression such as `datum.calibrator == calibrator` would name a missing signal. Move them to
 * the top level (first declaration wins), where the front end can also set them.
 */
function hoistLayerParams(spec: Record<string, unknown>): void {
  const hoisted: unknown[] = Array.isArray(spec.params) ? [...spec.params] : [];
  const names = new Set(hoisted.filter(isRecord).map((p) => p.name));
  const visit = (node: Record<string, unknown>): void => {
    if (!Array.isArray(node.layer)) return;
    for (const child of node.layer) {
      if (!isRecord(child)) continue;
      if (Array.isArray(child.params)) {
        const kept = child.params.filter((p) => {
          if (!isRecord(p) || "select" in p || typeof p.name !== "string") return true;
          if (!names.has(p.name)) {
            names.add(p.name);
            hoisted.push(p);
          }
          return false;
        });
        if (kept.length > 0) child.params = kept;
        else delete child.params;
      }
      visit(child);
    }
  };
  visit(spec);
  if (hoisted.length > 0) spec.params = hoisted;
}

export interface ChartOptions {
  renderer?: Renderer;
  dark?: boolean;
  /** Initial value of the `calibrator` signal. */
  calibrator?: string;
  /** Called with every error of embedding or updating (drawn into the widget). */
  onError?: (error: unknown) => void;
  /** Where timings go; defaults to `globalThis.__calwatchTimings`. */
  timings?: number[];
}

/**
 * A chart that accepts updates at once and applies them, in order, as soon as its asynchronous
 * embed has finished. Datasets the spec does not read are skipped.
 */
export class Chart {
  readonly el: HTMLElement;
  /** Datasets read by the spec (narrowed, once embedded, to those in the compiled Vega spec). */
  datasets: Set<string>;
  private result: Result | null = null;
  private signals = new Set<string>();
  private chain: Promise<void>;
  private finalized = false;
  private embedFailed = false;
  private lastWidth = 0;
  private readonly observer: ResizeObserver | null = null;
  private readonly onError: (error: unknown) => void;
  private readonly timings: number[];

  constructor(el: HTMLElement, spec: VegaLiteSpec, options: ChartOptions = {}) {
    this.el = el;
    this.datasets = datasetNames(spec);
    this.onError = options.onError ?? ((e) => console.error("calwatch chart:", e));
    this.timings = options.timings ?? timingsSink();
    const embedOptions: EmbedOptions = {
      mode: "vega-lite",
      renderer: options.renderer ?? "svg",
      actions: false,
      defaultStyle: false,
      // Empty datasets (before the replay) make Vega warn about infinite extents; keep errors.
      logLevel: LogError,
      ...(options.dark ? { theme: "dark", config: { background: "transparent" } } : {}),
    };
    this.chain = embed(el, prepareSpec(spec) as VisualizationSpec, embedOptions).then(
      async (result) => {
        if (this.finalized) {
          result.finalize();
          return;
        }
        this.result = result;
        const vg = result.vgSpec;
        const topData = new Set((vg.data ?? []).map((d) => d.name));
        this.datasets = new Set([...this.datasets].filter((n) => topData.has(n)));
        this.signals = new Set((vg.signals ?? []).map((s) => s.name));
        if (options.calibrator !== undefined) await this.setSignal(options.calibrator);
        if (el.clientWidth > 0) await this.setWidth(el.clientWidth);
      },
      (error: unknown) => {
        this.embedFailed = true;
        this.onError(error);
      },
    );
    if (typeof ResizeObserver !== "undefined") {
      this.observer = new ResizeObserver((entries) => {
        const width = Math.floor(entries[entries.length - 1]?.contentRect.width ?? 0);
        void this.resize(width);
      });
      this.observer.observe(el);
    }
  }

  /** The Vega view, once embedded. */
  get view(): Result["view"] | null {
    return this.result?.view ?? null;
  }

  /** Resolves when everything queued so far has been applied. */
  settled(): Promise<void> {
    return this.chain;
  }

  /** Applies an update to the datasets this chart reads; resolves once rendered. */
  apply(update: ChartUpdate): Promise<void> {
    return this.enqueue(() => this.applyNow(update));
  }

  /** Sets the `calibrator` signal (skipped when the spec has no such top-level signal). */
  setCalibrator(selected: string): Promise<void> {
    return this.enqueue(() => this.setSignal(selected));
  }

  /** Sets the view width in px (from the container; ignored while 0, e.g. when hidden). */
  resize(width: number): Promise<void> {
    return this.enqueue(() => this.setWidth(width));
  }

  finalize(): void {
    if (this.finalized) return;
    this.finalized = true;
    this.observer?.disconnect();
    this.result?.finalize();
    this.result = null;
  }

  private enqueue(task: () => Promise<void>): Promise<void> {
    const run = async (): Promise<void> => {
      if (this.finalized || this.embedFailed || this.result === null) return;
      try {
        await task();
      } catch (error) {
        this.onError(error);
      }
    };
    this.chain = this.chain.then(run);
    return this.chain;
  }

  private async applyNow(update: ChartUpdate): Promise<void> {
    const view = this.result?.view;
    if (!view) return;
    const start = performance.now();
    let touched = false;
    for (const name of this.datasets) {
      const change = update.changes.get(name);
      if (!update.reset && change === undefined) continue;
      const cs = changeset();
      if (update.reset) cs.remove(() => true);
      else if (change !== undefined && change.replaces.size > 0) {
        const keys = change.replaces;
        cs.remove((d: KeyedRow) => keys.has(d.key));
      }
      // Copies: Vega tags inserted objects with its tuple ids; views must not share tuples.
      if (change !== undefined) cs.insert(change.rows.map((row) => ({ ...row })));
      view.change(name, cs);
      touched = true;
    }
    if (!touched) return;
    await view.runAsync();
    this.timings.push(performance.now() - start);
    if (this.timings.length > MAX_TIMINGS) this.timings.splice(0, this.timings.length - MAX_TIMINGS);
  }

  private async setSignal(selected: string): Promise<void> {
    const view = this.result?.view;
    if (!view || !this.signals.has("calibrator")) return;
    await view.signal("calibrator", calibratorSignalValue(selected)).runAsync();
  }

  private async setWidth(width: number): Promise<void> {
    const view = this.result?.view;
    if (!view || width <= 0 || width === this.lastWidth || !this.signals.has("width")) return;
    this.lastWidth = width;
    await view.width(width).runAsync();
  }
}
