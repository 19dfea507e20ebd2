// One Vega view per chart: embedding, streaming changesets into named datasets, the calibrator
// signal and container-width tracking. Browser-only state (the Vega views themselves).

import { changeset, Error as LogError } from "vega";
import embed, { type EmbedOptions, type Result, type VisualizationSpec } from "vega-embed";
import type { KeyedRow, VegaLiteSpec } from "./model";
import { installStableScales } from "./stablescales";
import type { ChartUpdate } from "./stream";

installStableScales();

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

/**
 * Names of the streamed datasets a Vega-Lite spec reads (`{"data": {"name": ...}}` anywhere in
 * it). Datasets the spec carries itself (top-level `datasets`: a reliability diagonal, a fixed
 * reference line) are static: they are not streamed, and a reset must not empty them.
 */
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
  if (isRecord(spec) && isRecord(spec.datasets)) {
    for (const inline of Object.keys(spec.datasets)) names.delete(inline);
  }
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
  if (!concat) fitTextToWidth(out);
  hoistLayerParams(out);
  return out;
}

/** Legend entries per row at a plot width of `width` px (an expression on Vega's `width` signal). */
export const LEGEND_COLUMNS = "max(1, floor(width / 130))";

/**
 * Titles and legends that follow the chart's width (any width, a 250 px side panel included):
 * a title longer than the plot is shortened with an ellipsis, and legend entries wrap into as many columns as fit instead
 * of one row running off the side, each label shortened to its column. Both are expressions on
 * Vega's `width` signal, so they follow a resize without re-embedding.
 */
export function fitTextToWidth(spec: VegaLiteSpec): void {
  const title = spec.title;
  if (typeof title === "string" || Array.isArray(title)) spec.title = { text: title, limit: { expr: "width" } };
  else if (isRecord(title) && title.limit === undefined) title.limit = { expr: "width" };
  const config = isRecord(spec.config) ? spec.config : {};
  const legend = isRecord(config.legend) ? config.legend : {};
  config.legend = {
    columns: { expr: LEGEND_COLUMNS },
    // A column holds a symbol, its offsets and the column padding (~50 px) besides the label.
    labelLimit: { expr: `max(40, width / (${LEGEND_COLUMNS}) - 50)` },
    titleLimit: { expr: "width" },
    ...legend,
  };
  spec.config = config;
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

/**
 * A compiled Vega spec without clipping on the brush rectangles of interval selections (named
 * `<selection>_brush` and `<selection>_brush_bg` by Vega-Lite). Vega-Lite clips them to the plot,
 * and the SVG renderer rewrites every clip path on every render: on the timeline, redrawn with
 * each update, that cost as much as drawing the changed marks. The rectangles stay inside the
 * plot anyway (a drag is clamped to the plot, `setBrush` places whole batches of the domain).
 */
export function unclipBrushes<T>(spec: T): T {
  const walk = (marks: unknown): void => {
    if (!Array.isArray(marks)) return;
    for (const mark of marks) {
      if (!isRecord(mark)) continue;
      if (typeof mark.name === "string" && /_brush(_bg)?$/.test(mark.name) && mark.type === "rect") delete mark.clip;
      walk(mark.marks);
    }
  };
  if (isRecord(spec)) walk(spec.marks);
  return spec;
}

/**
 * Tooltip text escaping, stricter than vega-tooltip's default (which escapes only `&` and `<`):
 * class names, labels and notes come from users and are shown as text, never markup.
 */
export function escapeHtml(value: unknown): string {
  return String(value)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** A brushed range of batches, from an interval selection's value: integers inside [lo, hi]. */
export function brushRange(value: unknown): [number, number] | null {
  if (!isRecord(value)) return null;
  const extent = Object.values(value)[0];
  if (!Array.isArray(extent) || extent.length !== 2) return null;
  const [a, b] = extent.map(Number) as [number, number];
  if (!Number.isFinite(a) || !Number.isFinite(b)) return null;
  const lo = Math.ceil(Math.min(a, b)) + 0; // + 0: no -0
  const hi = Math.floor(Math.max(a, b)) + 0;
  return lo <= hi ? [lo, hi] : null;
}

/** Scale of the x channel as Vega exposes it: a function with its domain. */
export type XScale = ((value: number) => number) & { domain?: () => unknown[] };

/**
 * Pixel extent of the `brush` rectangle that shows batches lo..hi on a chart whose x scale is the
 * batch: half a batch beyond each end, so the rectangle covers whole batches, a single batch
 * gets a width, and float error in the pixel round trip (Vega inverts the pixels back to data)
 * cannot move an end across a batch: `brushRange` of the inverted extent is [lo, hi] again.
 * Null while the scale cannot place it (no data yet: an empty or non-finite domain).
 */
export function brushPixels(scale: XScale, range: readonly [number, number]): [number, number] | null {
  const domain = typeof scale.domain === "function" ? scale.domain().map(Number) : [];
  if (domain.length < 2 || !domain.every(Number.isFinite) || domain[0] === domain[domain.length - 1]) return null;
  const lo = Math.min(range[0], range[1]);
  const hi = Math.max(range[0], range[1]);
  const x0 = scale(lo - 0.5);
  const x1 = scale(hi + 0.5);
  if (!Number.isFinite(x0) || !Number.isFinite(x1) || x0 === x1) return null;
  return [x0, x1];
}

/** "3-6" for a brushed range, "" for none (the `data-brush` attribute of a chart's element). */
export function brushText(range: readonly [number, number] | null): string {
  return range === null ? "" : `${range[0]}-${range[1]}`;
}

export interface ChartOptions {
  renderer?: Renderer;
  dark?: boolean;
  /** Initial value of the `calibrator` signal. */
  calibrator?: string;
  /** Initial values of other top-level signals (set when the spec has them). */
  signals?: Record<string, unknown>;
  /** Starts inactive (a hidden tab): updates are deferred until `activate`. Default active. */
  active?: boolean;
  /** The whole current data, for an inactive chart catching up on `activate`. */
  snapshot?: () => ChartUpdate | null;
  /** A click on a mark of a batch (its datum has a numeric `batch`), or on the x axis of `batch`. */
  onBatchClick?: (batch: number) => void;
  /** A click on a mark picks what its datum names (a lane's detector, a slice's column). */
  onPick?: (datum: Record<string, unknown>) => void;
  /** Clicks anywhere on the plot pick the batch under the pointer (x scale = batch: the timeline). */
  clickByX?: boolean;
  /**
   * The user changed the `brush` interval selection (null: cleared). Not called for a brush set
   * by `setBrush`.
   */
  onBrush?: (range: [number, number] | null) => void;
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
  /** A brush `setBrush` asked for and not drawn yet (undefined: none; null: clear it). */
  private brushTarget: [number, number] | null | undefined = undefined;
  /** True while `setBrush` draws: the brush listener then does not report to `onBrush`. */
  private brushQuiet = false;
  private readonly observer: ResizeObserver | null = null;
  private readonly onError: (error: unknown) => void;
  private readonly timings: number[];

  constructor(el: HTMLElement, spec: VegaLiteSpec, options: ChartOptions = {}) {
    this.el = el;
    this.datasets = datasetNames(spec);
    this.onError = options.onError ?? ((e) => console.error("calwatch chart:", e));
    this.timings = options.timings ?? timingsSink();
    this.active = options.active ?? true;
    this.snapshot = options.snapshot ?? (() => null);
    const embedOptions: EmbedOptions = {
      mode: "vega-lite",
      renderer: options.renderer ?? "svg",
      actions: false,
      defaultStyle: false,
      // Empty datasets (before the replay) make Vega warn about infinite extents; keep errors.
      logLevel: LogError,
      tooltip: { sanitize: escapeHtml },
      patch: unclipBrushes,
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
        const initial = { ...(options.signals ?? {}) };
        if (options.calibrator !== undefined) initial.calibrator = calibratorSignalValue(options.calibrator);
        await this.setSignalsNow(initial);
        this.listen(result.view, options);
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

  private active: boolean;
  private stale = false;
  private pendingSignals: Record<string, unknown> = {};
  private readonly snapshot: () => ChartUpdate | null;

  /** Whether updates are applied as they come (false: deferred until `activate`). */
  get isActive(): boolean {
    return this.active;
  }

  /**
   * Shows the chart again: applies the signals set meanwhile and, if data arrived while it was
   * inactive, the whole current data once.
   */
  activate(): Promise<void> {
    if (this.active) return this.chain;
    this.active = true;
    const signals = this.pendingSignals;
    this.pendingSignals = {};
    const stale = this.stale;
    this.stale = false;
    return this.enqueue(async () => {
      await this.setSignalsNow(signals);
      const snap = stale ? this.snapshot() : null;
      if (snap !== null) await this.applyNow(snap, false);
    });
  }

  /** Hides the chart: later updates wait for `activate` (resets still apply). */
  deactivate(): void {
    this.active = false;
  }

  /** The Vega view, once embedded. */
  get view(): Result["view"] | null {
    return this.result?.view ?? null;
  }

  /** Resolves when everything queued so far has been applied. */
  settled(): Promise<void> {
    return this.chain;
  }

  /**
   * Applies an update to the datasets this chart reads; resolves once rendered. While inactive
   * only resets are applied; other updates mark the chart stale (caught up on `activate`).
   */
  apply(update: ChartUpdate): Promise<void> {
    if (!this.active && !update.reset) {
      this.stale = true;
      return Promise.resolve();
    }
    if (update.reset) this.stale = false;
    return this.enqueue(() => this.applyNow(update));
  }

  /** Sets the `calibrator` signal (skipped when the spec has no such top-level signal). */
  setCalibrator(selected: string): Promise<void> {
    // Applied at once even while inactive: a picker change is rare, and a hidden chart (a
    // report's panels) must filter like a visible one.
    return this.enqueue(() => this.setSignalsNow({ calibrator: calibratorSignalValue(selected) }));
  }

  /** Sets top-level signals the spec declares (others are skipped), deferred while inactive. */
  setSignals(values: Record<string, unknown>): Promise<void> {
    if (!this.active) {
      Object.assign(this.pendingSignals, values);
      return Promise.resolve();
    }
    return this.enqueue(() => this.setSignalsNow(values));
  }

  /**
   * Draws the `brush` interval selection over batches lo..hi (null: clears it), as if the user
   * had brushed them, without reporting to `onBrush`. Drawn once the x scale has a domain (after
   * the first data, if none yet); afterwards Vega-Lite keeps the brush on the same batches when
   * the scale changes (new batches, a resize). Skipped when the brush already shows that range,
   * and on charts without a `brush` selection.
   */
  setBrush(range: readonly [number, number] | null): Promise<void> {
    this.brushTarget = range === null ? null : [range[0], range[1]];
    return this.enqueue(() => this.drawBrush());
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

  private async applyNow(update: ChartUpdate, timed = true): Promise<void> {
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
    if (this.brushTarget !== undefined) await this.drawBrush(); // waiting for a domain
    if (!timed) return;
    this.timings.push(performance.now() - start);
    if (this.timings.length > MAX_TIMINGS) this.timings.splice(0, this.timings.length - MAX_TIMINGS);
  }

  private async setSignalsNow(values: Record<string, unknown>): Promise<void> {
    const view = this.result?.view;
    if (!view) return;
    let changed = false;
    for (const [name, value] of Object.entries(values)) {
      if (!this.signals.has(name) || view.signal(name) === value) continue;
      view.signal(name, value);
      changed = true;
    }
    if (changed) await view.runAsync();
  }

  private async drawBrush(): Promise<void> {
    const view = this.result?.view;
    const target = this.brushTarget;
    if (!view || target === undefined) return;
    if (!this.signals.has("brush_x") || !this.signals.has("brush")) {
      this.brushTarget = undefined;
      return;
    }
    if (brushText(brushRange(view.signal("brush"))) === brushText(target)) {
      this.brushTarget = undefined; // already shown (e.g. brushed here)
      return;
    }
    let pixels: [number, number] | [] = [];
    if (target !== null) {
      let scale: XScale;
      try {
        scale = view.scale("x") as XScale;
      } catch {
        return;
      }
      const placed = typeof scale === "function" ? brushPixels(scale, target) : null;
      if (placed === null) return; // no domain or width yet: drawn after the next data / resize
      pixels = placed;
    }
    this.brushTarget = undefined;
    this.brushQuiet = true;
    try {
      // The pixel signal drives the data signal (brush_batch = invert(brush_x)), the selection
      // store and the rectangle, as a drag would; [] clears the store.
      view.signal("brush_x", pixels);
      await view.runAsync();
    } finally {
      this.brushQuiet = false;
    }
  }

  /** Click and brush listeners (a drag that ends on a mark is not a click). */
  private listen(view: Result["view"], options: ChartOptions): void {
    const { onBatchClick, onBrush } = options;
    if (this.signals.has("brush")) {
      let last = brushText(brushRange(view.signal("brush")));
      this.el.dataset.brush = last;
      view.addSignalListener("brush", (_name: string, value: unknown) => {
        const text = brushText(brushRange(value));
        if (text === last) return;
        last = text;
        this.el.dataset.brush = text; // the batches the brush covers, for tests
        if (!this.brushQuiet) onBrush?.(brushRange(value));
      });
    }
    const { onPick } = options;
    if (onPick !== undefined) {
      view.addEventListener("click", (_event, item) => {
        const datum = (item as { datum?: Record<string, unknown> } | null | undefined)?.datum;
        if (datum !== undefined && datum !== null) onPick(datum);
      });
    }
    if (onBatchClick === undefined) return;
    let down: [number, number] | null = null;
    view.addEventListener("mousedown", (event) => {
      const e = event as MouseEvent;
      down = [e.clientX, e.clientY];
    });
    view.addEventListener("click", (event, item) => {
      const e = event as MouseEvent;
      if (down !== null && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 3) return;
      const datum = (item as { datum?: Record<string, unknown> } | null | undefined)?.datum;
      let batch = typeof datum?.batch === "number" && Number.isInteger(datum.batch) ? datum.batch : null;
      // Areas and lines: the item is the whole path; read the batch off the x scale.
      const markType = (item as { mark?: { marktype?: string } } | null | undefined)?.mark?.marktype;
      const path = markType === "area" || markType === "line";
      if (path) batch = null; // the datum of a whole path is its first point's
      if (options.clickByX && batch === null) batch = this.batchAt(view, e);
      if (batch !== null) onBatchClick(batch);
    });
  }

  /** The batch under the pointer on a chart whose x scale is the batch (null elsewhere). */
  private batchAt(view: Result["view"], e: MouseEvent): number | null {
    let scale: ((x: number) => number) & { invert?: (px: number) => number; domain?: () => number[] };
    try {
      scale = view.scale("x") as typeof scale;
    } catch {
      return null;
    }
    if (typeof scale?.invert !== "function" || typeof scale.domain !== "function") return null;
    const surface = this.el.querySelector("svg, canvas");
    if (surface === null) return null;
    const x = e.clientX - surface.getBoundingClientRect().left - view.origin()[0];
    const batch = Math.round(scale.invert(x));
    const [lo, hi] = scale.domain().map(Number) as [number, number];
    return Number.isFinite(batch) && batch >= Math.floor(lo) && batch <= Math.ceil(hi) ? batch : null;
  }

  private async setWidth(width: number): Promise<void> {
    const view = this.result?.view;
    if (!view || width <= 0 || width === this.lastWidth || !this.signals.has("width")) return;
    this.lastWidth = width;
    await view.width(width).runAsync();
    if (this.brushTarget !== undefined) await this.drawBrush(); // waiting for a width
  }
}
