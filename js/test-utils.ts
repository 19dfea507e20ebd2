// Test helpers (not bundled): an in-memory AnyModel that behaves like a Backbone model for the
// parts the widget uses (get/set firing change:<trait>, on/off, save_changes, send, msg:custom).

import type { AnyModel } from "@anywidget/types";
import type { WidgetModel } from "./model";

// Backbone passes different arguments per event (msg:custom: content, buffers).
// biome-ignore lint/suspicious/noExplicitAny: mirrors @anywidget/types' EventHandler
type Handler = (...args: any[]) => void;

export class FakeModel implements AnyModel<WidgetModel> {
  state: WidgetModel;
  saves = 0;
  sent: unknown[] = [];
  private handlers = new Map<string, Handler[]>();
  widget_manager = {
    get_model: () => Promise.reject(new Error("no widget manager in tests")),
  };

  constructor(state: Partial<WidgetModel> = {}) {
    this.state = {
      _title: "Monitor",
      _specs: {},
      _chart_order: [],
      _calibrators: [],
      _selected: "",
      _paused: false,
      _status: {
        rows_seen: 0,
        rows_labelled: 0,
        rows_pending: 0,
        batches: 0,
        labels_unmatched: 0,
        rows_in_window: 0,
      },
      _error: "",
      ...state,
    };
  }

  get<K extends keyof WidgetModel>(key: K): WidgetModel[K] {
    return this.state[key];
  }

  set<K extends keyof WidgetModel>(key: K, value: WidgetModel[K]): void {
    if (this.state[key] === value) return;
    this.state[key] = value;
    this.emit(`change:${key}`);
  }

  save_changes(): void {
    this.saves += 1;
  }

  send(content: unknown): void {
    this.sent.push(content);
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

  /** Number of handlers registered for an event. */
  listenerCount(event: string): number {
    return this.handlers.get(event)?.length ?? 0;
  }

  emit(event: string, ...args: unknown[]): void {
    for (const h of this.handlers.get(event) ?? []) h(...args);
  }

  /** What the kernel's `widget.send(content)` does. */
  receive(content: unknown): void {
    this.emit("msg:custom", content, []);
  }
}
