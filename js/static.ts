// A frozen view with no kernel: the standalone HTML report renders the widget from saved state.
//
// StaticModel answers the view's replay request with the saved datasets (asynchronously, as a
// kernel would) and keeps browser-side trait changes (the calibrator picker) locally. The view
// is marked read-only (_readonly), so nothing offers to pause the stream or acknowledge warnings.
//
// A live read-only view (`calwatch serve`) is the same view fed newer snapshots: `replace` sets
// the traits that changed (those the reader owns stay as chosen) and sends every view a replay
// of the new datasets with a higher seq, so the charts reset their data in place (no re-embed,
// no reload; the open tab, picker and brush stay).

import type { AnyModel } from "@anywidget/types";
import type { KeyedRow, WidgetModel } from "./model";
import { renderView, type ViewOptions } from "./widget";

// biome-ignore lint/suspicious/noExplicitAny: Backbone passes different arguments per event
type Handler = (...args: any[]) => void;

export type Datasets = Record<string, KeyedRow[]>;

/** Traits the reader sets in the browser: a newer snapshot does not overwrite them. */
const READER_TRAITS: ReadonlySet<string> = new Set([
  "_selected",
  "_paused",
  "_readonly",
  "_batch_range",
  "_class_filter",
  "_alpha",
  "_kept_share",
  "_window_rows",
]);

export class StaticModel implements AnyModel<WidgetModel> {
  private readonly state: WidgetModel;
  private readonly handlers = new Map<string, Handler[]>();
  /** Views that asked for a replay (each gets the datasets again on `replace`). */
  private readonly views = new Set<string>();
  private seq = 0;
  widget_manager = {
    get_model: () => Promise.reject(new Error("a static report has no widget manager")),
  };

  constructor(
    state: WidgetModel,
    private datasets: Datasets,
  ) {
    this.state = { ...state, _readonly: true, _paused: false };
  }

  get<K extends keyof WidgetModel>(key: K): WidgetModel[K] {
    return this.state[key];
  }

  set<K extends keyof WidgetModel>(key: K, value: WidgetModel[K]): void {
    if (this.state[key] === value) return;
    this.state[key] = value;
    this.emit(`change:${key}`);
  }

  save_changes(): void {}

  send(content: unknown): void {
    const request = content as { kind?: unknown; view?: unknown };
    if (request?.kind !== "replay-request") return; // acknowledgements need a kernel
    if (typeof request.view === "string") this.views.add(request.view);
    const reply = { kind: "replay", view: request.view, seq: this.seq, data: this.datasets };
    setTimeout(() => this.emit("msg:custom", reply, []), 0);
  }

  /**
   * Replaces the saved state and datasets with a newer snapshot's: the traits that changed are
   * set (those the reader owns are kept), then every view gets the new datasets as a replay with
   * a higher seq (a late answer to an earlier request, older, is then ignored by the view).
   */
  replace(state: WidgetModel, datasets: Datasets): void {
    const current = this.state as unknown as Record<string, unknown>;
    for (const [key, value] of Object.entries(state)) {
      if (READER_TRAITS.has(key) || JSON.stringify(current[key]) === JSON.stringify(value)) continue;
      current[key] = value;
      this.emit(`change:${key}`);
    }
    this.datasets = datasets;
    this.seq += 1;
    for (const view of this.views) this.emit("msg:custom", { kind: "replay", view, seq: this.seq, data: datasets }, []);
  }

  on(event: string, handler: Handler): void {
    this.handlers.set(event, [...(this.handlers.get(event) ?? []), handler]);
  }

  off(event?: string | null, handler?: Handler | null): void {
    if (event == null) {
      this.handlers.clear();
      return;
    }
    const left = handler == null ? [] : (this.handlers.get(event) ?? []).filter((h) => h !== handler);
    this.handlers.set(event, left);
  }

  private emit(event: string, ...args: unknown[]): void {
    for (const h of this.handlers.get(event) ?? []) h(...args);
  }
}

/** Renders a frozen view of saved widget state and datasets into `el`; returns its cleanup. */
export function renderStatic(
  el: HTMLElement,
  state: WidgetModel,
  datasets: Datasets,
  options: ViewOptions = {},
): () => void {
  return renderView(new StaticModel(state, datasets), el, options);
}

/** A read-only view that newer snapshots update in place. */
export interface LiveView {
  /** Shows a newer snapshot's state and datasets (see StaticModel.replace). */
  update(state: WidgetModel, datasets: Datasets): void;
  /** Removes the view. */
  dispose(): void;
}

/** Renders a read-only view of saved state into `el` that `update` moves to newer snapshots. */
export function renderLive(el: HTMLElement, state: WidgetModel, datasets: Datasets, options: ViewOptions = {}): LiveView {
  const model = new StaticModel(state, datasets);
  const dispose = renderView(model, el, options);
  return { update: (next, data) => model.replace(next, data), dispose };
}
