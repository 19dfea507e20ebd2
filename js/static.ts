// A frozen view with no kernel: the standalone HTML report renders the widget from saved state.
//
// StaticModel answers the view's replay request with the saved datasets (asynchronously, as a
// kernel would) and keeps browser-side trait changes (the calibrator picker) locally. The view
// is marked read-only (_readonly), so nothing offers to pause the stream or acknowledge warnings.

import type { AnyModel } from "@anywidget/types";
import type { KeyedRow, WidgetModel } from "./model";
import { renderView, type ViewOptions } from "./widget";

// biome-ignore lint/suspicious/noExplicitAny: Backbone passes different arguments per event
type Handler = (...args: any[]) => void;

export type Datasets = Record<string, KeyedRow[]>;

export class StaticModel implements AnyModel<WidgetModel> {
  private readonly state: WidgetModel;
  private readonly handlers = new Map<string, Handler[]>();
  widget_manager = {
    get_model: () => Promise.reject(new Error("a static report has no widget manager")),
  };

  constructor(
    state: WidgetModel,
    private readonly datasets: Datasets,
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
    const reply = { kind: "replay", view: request.view, seq: 0, data: this.datasets };
    setTimeout(() => this.emit("msg:custom", reply, []), 0);
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
