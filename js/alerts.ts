// Shift warnings under the header: one line per open, unacknowledged warning (most recent first,
// two at most unless expanded): what broke and since when, a button that expands it to the full
// text (explanation, what it threatens, the suggested action, details) and the acknowledge form;
// and a log of every warning.
//
// Kernel-synced state read here: _warnings (validated by parseWarnings; a missing trait is an
// empty list). Sent to the kernel: {kind: "acknowledge", episode, note}.
// Browser-only UI state kept here: whether the banner list is expanded and the log open, and per
// banner whether its full text is shown, the acknowledge form (open, typed note), "acknowledgement
// sent" and the details disclosure. Banners are kept by episode across updates of the trait, so that state survives
// the kernel rewriting the list (the statistic of an open warning changes every batch).

import type { AnyModel } from "@anywidget/types";
import { type AcknowledgeMessage, parseWarnings, type ShiftWarning, type WidgetModel } from "./model";

/** Banners shown before the "+N more" toggle. */
export const MAX_BANNERS = 2;

const fmt = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 4 });

/** A statistic or threshold: 4 significant digits, exponent notation when very large or small. */
export function formatNumber(x: number): string {
  if (Number.isNaN(x)) return "n/a";
  if (!Number.isFinite(x)) return x > 0 ? "∞" : "-∞";
  const abs = Math.abs(x);
  if (abs >= 1e6 || (abs > 0 && abs < 1e-3)) return x.toExponential(2);
  return fmt.format(x);
}

/** "rows 1,200–1,499" when the kernel sends the stream rows involved, else "". */
export function formatRows(w: Pick<ShiftWarning, "first_row" | "last_row">): string {
  const { first_row: first, last_row: last } = w;
  if (first === undefined) return "";
  const f = (n: number) => new Intl.NumberFormat("en-US").format(n);
  if (last === undefined) return `from row ${f(first)}`;
  return last === first ? `row ${f(first)}` : `rows ${f(first)}–${f(last)}`;
}

/** "since batch 12" while open; "batch 12" / "batches 12–15" once closed. */
export function formatBatches(w: Pick<ShiftWarning, "first_batch" | "last_batch" | "open">): string {
  if (Number.isNaN(w.first_batch)) return "";
  if (w.open) return `since batch ${w.first_batch}`;
  if (Number.isNaN(w.last_batch) || w.last_batch === w.first_batch) return `batch ${w.first_batch}`;
  return `batches ${w.first_batch}–${w.last_batch}`;
}

/** The warnings that get a banner (open and not acknowledged), most recent first. */
export function bannered(warnings: readonly ShiftWarning[]): ShiftWarning[] {
  return warnings.filter((w) => w.open && !w.acknowledged).reverse();
}

/** "3 warnings (1 open)", or "3 warnings (1 open, 1 acknowledged)": open means nobody acknowledged it yet. */
export function formatCount(warnings: readonly ShiftWarning[]): string {
  const n = warnings.length;
  const open = warnings.filter((w) => w.open && !w.acknowledged).length;
  const acked = warnings.filter((w) => w.open && w.acknowledged).length;
  const parts = acked > 0 ? `${open} open, ${acked} acknowledged` : `${open} open`;
  return `${n} ${n === 1 ? "warning" : "warnings"} (${parts})`;
}

/** "acknowledged by ana at 2025-… — note" (the parts the kernel filled in). */
export function formatAck(w: Pick<ShiftWarning, "acknowledged" | "ack_by" | "ack_at" | "ack_note">): string {
  if (!w.acknowledged) return "";
  let text = "acknowledged";
  if (w.ack_by !== "") text += ` by ${w.ack_by}`;
  if (w.ack_at !== "") text += ` at ${w.ack_at}`;
  if (w.ack_note !== "") text += ` — ${w.ack_note}`;
  return text;
}

export interface AlertsOptions {
  /** Problems with `_warnings` ("" once there are none), for the widget's error box. */
  onError?: (message: string) => void;
}

export interface Alerts {
  readonly el: HTMLElement;
  /** Unregisters the model and DOM listeners. */
  dispose(): void;
}

interface Banner {
  el: HTMLElement;
  update(w: ShiftWarning): void;
}

export function createAlerts(
  model: AnyModel<WidgetModel>,
  doc: Document = document,
  options: AlertsOptions = {},
): Alerts {
  const el = doc.createElement("div");
  el.className = "calwatch-alerts";
  el.setAttribute("role", "region");
  el.setAttribute("aria-label", "Shift warnings");

  const list = doc.createElement("div");
  list.className = "calwatch-warnings";
  list.setAttribute("aria-live", "polite");
  const more = doc.createElement("button");
  more.type = "button";
  more.className = "calwatch-more calwatch-link";
  const toggle = doc.createElement("button");
  toggle.type = "button";
  toggle.className = "calwatch-warning-toggle calwatch-link";
  const log = doc.createElement("div");
  log.className = "calwatch-warning-log";
  log.id = `calwatch-warning-log-${Math.random().toString(36).slice(2)}`;
  toggle.setAttribute("aria-controls", log.id);
  el.append(list, more, toggle, log);

  let expanded = false;
  let logOpen = false;
  let warnings: ShiftWarning[] = [];
  /** Banners by episode, for every bannered warning (attached or behind "+N more"). */
  const banners = new Map<number, Banner>();
  /** Episodes whose acknowledgement was sent and not yet reflected in _warnings. */
  const sent = new Set<number>();
  /** Episodes whose banner shows its full text (the rest show one line). */
  const expandedBanners = new Set<number>();

  const part = (className: string, tag = "div") => {
    const e = doc.createElement(tag);
    e.className = className;
    return e;
  };

  const newBanner = (episode: number): Banner => {
    const b = part("calwatch-warning");
    b.dataset.episode = String(episode);
    // The one line: a button that shows or hides the rest.
    const head = part("calwatch-warning-head calwatch-warning-line", "button") as HTMLButtonElement;
    head.type = "button";
    const name = part("calwatch-warning-name", "strong");
    const batches = part("calwatch-warning-batches", "span");
    const more = part("calwatch-warning-expand", "span");
    more.setAttribute("aria-hidden", "true");
    head.append(name, batches, more);
    const body = part("calwatch-warning-body");
    body.id = `calwatch-warning-body-${Math.random().toString(36).slice(2)}`;
    head.setAttribute("aria-controls", body.id);
    const explanation = part("calwatch-warning-explanation");
    const threatens = part("calwatch-warning-threatens");
    const action = part("calwatch-warning-action");
    const details = part("calwatch-warning-details", "details");
    const summary = doc.createElement("summary");
    summary.textContent = "details";
    const stat = part("calwatch-warning-stat");
    const rows = part("calwatch-warning-rows");
    const control = part("calwatch-warning-control");
    details.append(summary, stat, rows, control);

    const actions = part("calwatch-ack-row");
    const ack = part("calwatch-ack", "button") as HTMLButtonElement;
    ack.type = "button";
    const form = part("calwatch-ack-form");
    form.hidden = true;
    const note = part("calwatch-ack-note", "input") as HTMLInputElement;
    note.type = "text";
    note.placeholder = "note (optional)";
    note.setAttribute("aria-label", "Acknowledgement note (optional)");
    const ok = part("calwatch-ack-ok", "button") as HTMLButtonElement;
    ok.type = "button";
    ok.textContent = "OK";
    const cancel = part("calwatch-ack-cancel", "button") as HTMLButtonElement;
    cancel.type = "button";
    cancel.textContent = "Cancel";
    form.append(note, ok, cancel);
    actions.append(ack, form);
    body.append(explanation, threatens, action, details, actions);
    b.append(head, body);

    return {
      el: b,
      update(w) {
        name.textContent = w.name;
        batches.textContent = formatBatches(w);
        const open = expandedBanners.has(w.episode);
        body.hidden = !open;
        b.classList.toggle("calwatch-warning-open", open);
        head.setAttribute("aria-expanded", String(open));
        head.title = open ? "Hide the details" : `${w.explanation} (click for the details and actions)`;
        more.textContent = open ? "▾" : "▸";
        explanation.textContent = w.explanation;
        threatens.textContent = `threatens: ${w.threatens}`;
        action.textContent = `suggested: ${w.action}`;
        stat.textContent = `statistic ${formatNumber(w.statistic)} vs threshold ${formatNumber(w.threshold)}`;
        rows.textContent = formatRows(w);
        rows.hidden = rows.textContent === "";
        control.textContent = `false alarms: ${w.false_alarm_control}`;
        const waiting = sent.has(w.episode);
        ack.disabled = waiting;
        ack.textContent = waiting ? "Acknowledging…" : "Acknowledge";
        ack.hidden = !form.hidden || Boolean(model.get("_readonly"));
      },
    };
  };

  const drawBanners = () => {
    const shown = bannered(warnings);
    const keep = new Set(shown.map((w) => w.episode));
    for (const episode of banners.keys()) if (!keep.has(episode)) banners.delete(episode);
    for (const episode of expandedBanners) if (!keep.has(episode)) expandedBanners.delete(episode);
    const visible = expanded ? shown : shown.slice(0, MAX_BANNERS);
    const els = visible.map((w) => {
      let banner = banners.get(w.episode);
      if (banner === undefined) {
        banner = newBanner(w.episode);
        banners.set(w.episode, banner);
      }
      banner.update(w);
      return banner.el;
    });
    // Re-attach only when the order changed: moving an element blurs a note being typed.
    const current = [...list.children];
    if (current.length !== els.length || current.some((c, i) => c !== els[i])) list.replaceChildren(...els);
    list.hidden = els.length === 0;
    const hiddenCount = shown.length - visible.length;
    more.hidden = shown.length <= MAX_BANNERS;
    more.textContent = expanded ? "show fewer" : `+${hiddenCount} more`;
    more.setAttribute("aria-expanded", String(expanded));
  };

  const drawLog = () => {
    toggle.hidden = warnings.length === 0;
    toggle.textContent = formatCount(warnings);
    toggle.setAttribute("aria-expanded", String(logOpen));
    log.hidden = !logOpen || warnings.length === 0;
    if (log.hidden) {
      log.replaceChildren();
      return;
    }
    const items = [...warnings].reverse().map((w) => {
      const li = doc.createElement("li");
      li.className = "calwatch-log-entry";
      li.dataset.episode = String(w.episode);
      li.classList.toggle("calwatch-log-open", w.open);
      li.classList.toggle("calwatch-log-acknowledged", w.acknowledged);
      const head = part("calwatch-log-head");
      const name = part("calwatch-warning-name", "strong");
      name.textContent = w.name;
      const rest = [formatBatches(w), w.open ? "open" : "closed"].filter((s) => s !== "");
      head.append(name, ` · ${rest.join(" · ")}`);
      li.append(head);
      li.title = w.explanation;
      const ack = formatAck(w);
      if (ack !== "") {
        const line = part("calwatch-log-ack");
        line.textContent = ack;
        li.append(line);
      }
      return li;
    });
    const ol = doc.createElement("ol");
    ol.append(...items);
    log.replaceChildren(ol);
  };

  const draw = () => {
    const parsed = parseWarnings(model.get("_warnings"));
    warnings = parsed.warnings;
    options.onError?.(parsed.problems.join("\n"));
    for (const w of warnings) if (w.acknowledged || !w.open) sent.delete(w.episode);
    for (const episode of [...sent]) if (!warnings.some((w) => w.episode === episode)) sent.delete(episode);
    drawBanners();
    drawLog();
    el.hidden = warnings.length === 0;
  };

  const bannerOf = (target: EventTarget | null) => {
    if (!(target instanceof Element)) return null;
    const b = target.closest<HTMLElement>("div.calwatch-warning[data-episode]");
    if (b === null || !list.contains(b)) return null;
    const episode = Number(b.dataset.episode);
    const form = b.querySelector<HTMLElement>(".calwatch-ack-form");
    const note = b.querySelector<HTMLInputElement>(".calwatch-ack-note");
    const ack = b.querySelector<HTMLButtonElement>("button.calwatch-ack");
    if (form === null || note === null || ack === null) return null;
    return { episode, form, note, ack };
  };
  type Target = NonNullable<ReturnType<typeof bannerOf>>;

  const openForm = (t: Target) => {
    t.form.hidden = false;
    t.ack.hidden = true;
    t.note.focus();
  };
  const closeForm = (t: Target) => {
    t.form.hidden = true;
    t.ack.hidden = false;
    t.note.value = "";
  };
  const confirm = (t: Target) => {
    const message: AcknowledgeMessage = { kind: "acknowledge", episode: t.episode, note: t.note.value.trim() };
    model.send(message);
    sent.add(t.episode);
    closeForm(t);
    drawBanners();
    t.ack.focus();
  };

  const onClick = (event: Event) => {
    const target = event.target;
    if (target === more) {
      expanded = !expanded;
      drawBanners();
      return;
    }
    if (target === toggle) {
      logOpen = !logOpen;
      drawLog();
      return;
    }
    const line = target instanceof Element ? target.closest<HTMLButtonElement>("button.calwatch-warning-line") : null;
    const lineOf = line?.closest<HTMLElement>("div.calwatch-warning[data-episode]");
    if (line && lineOf && list.contains(lineOf)) {
      const episode = Number(lineOf.dataset.episode);
      if (expandedBanners.has(episode)) expandedBanners.delete(episode);
      else expandedBanners.add(episode);
      drawBanners();
      return;
    }
    if (!(target instanceof HTMLButtonElement)) return;
    const t = bannerOf(target);
    if (t === null) return;
    if (target.classList.contains("calwatch-ack") && !target.disabled) openForm(t);
    else if (target.classList.contains("calwatch-ack-ok")) confirm(t);
    else if (target.classList.contains("calwatch-ack-cancel")) {
      closeForm(t);
      t.ack.focus();
    }
  };
  const onKeydown = (event: Event) => {
    const key = (event as KeyboardEvent).key;
    if (!(event.target instanceof HTMLInputElement) || (key !== "Enter" && key !== "Escape")) return;
    const t = bannerOf(event.target);
    if (t === null) return;
    event.preventDefault();
    if (key === "Enter") confirm(t);
    else {
      closeForm(t);
      t.ack.focus();
    }
  };
  el.addEventListener("click", onClick);
  el.addEventListener("keydown", onKeydown);
  model.on("change:_warnings", draw);
  draw();

  return {
    el,
    dispose() {
      model.off("change:_warnings", draw);
      el.removeEventListener("click", onClick);
      el.removeEventListener("keydown", onKeydown);
    },
  };
}
