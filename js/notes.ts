// Notes: the list of notes pinned to batches, warnings or the stream (the kernel's `notes`
// dataset rows), and a form that sends a `note` message to the kernel (hidden in a read-only
// report). Browser-only state: the form's fields. Every text goes through textContent.

import type { AnyModel } from "@anywidget/types";
import { type KeyedRow, type NoteMessage, parseWarnings, type WidgetModel } from "./model";

/** "batch 3 · ana · 2025-01-02T03:04:05+00:00" (the parts a note has). */
export function noteHeading(row: KeyedRow): string {
  const parts: string[] = [];
  if (typeof row.batch === "number") parts.push(`batch ${row.batch}`);
  if (typeof row.episode === "number") parts.push(`warning #${row.episode}`);
  if (parts.length === 0) parts.push("stream");
  if (typeof row.author === "string" && row.author !== "") parts.push(row.author);
  if (typeof row.at === "string" && row.at !== "") parts.push(row.at);
  return parts.join(" · ");
}

export interface Notes {
  readonly el: HTMLElement;
  /** Redraws the list from the `notes` rows (nothing to do when they are the rows shown). */
  draw(rows: readonly KeyedRow[]): void;
  /** Points the form at a batch and opens it (from the row table). */
  pinTo(batch: number): void;
  dispose(): void;
}

/**
 * Room left of the list for its numbers: "244." needs four characters, and the list scrolls, so
 * a marker outside that room is cut off (a long stream showed "9." for note 239).
 */
export function markerRoom(count: number): string {
  return `${String(Math.max(1, count)).length + 1.5}ch`;
}

export function createNotes(model: AnyModel<WidgetModel>, doc: Document = document): Notes {
  const el = doc.createElement("details");
  el.className = "calwatch-notes";
  const summary = doc.createElement("summary");
  summary.className = "calwatch-notes-summary";
  const list = doc.createElement("ol");
  list.className = "calwatch-notes-list";

  const form = doc.createElement("div");
  form.className = "calwatch-note-form";
  const target = doc.createElement("select");
  target.className = "calwatch-note-target";
  target.setAttribute("aria-label", "Pin the note to");
  const batch = doc.createElement("input");
  batch.type = "number";
  batch.min = "0";
  batch.step = "1";
  batch.className = "calwatch-note-batch";
  batch.setAttribute("aria-label", "Batch");
  batch.placeholder = "batch";
  const author = doc.createElement("input");
  author.type = "text";
  author.className = "calwatch-note-author";
  author.setAttribute("aria-label", "Author");
  const text = doc.createElement("textarea");
  text.className = "calwatch-note-text";
  text.rows = 2;
  text.placeholder = "note";
  text.setAttribute("aria-label", "Note");
  const add = doc.createElement("button");
  add.type = "button";
  add.className = "calwatch-note-add";
  add.textContent = "Add note";
  form.append(target, batch, author, text, add);
  el.append(summary, list, form);

  let count = 0;
  /** The rows the list shows, in order. */
  let shown: readonly KeyedRow[] = [];
  const drawSummary = () => {
    summary.textContent = count === 0 ? "Notes" : `Notes (${count})`;
  };
  const drawTargets = () => {
    const current = target.value;
    const options: [string, string][] = [
      ["batch", "batch"],
      ["stream", "whole stream"],
    ];
    for (const w of parseWarnings(model.get("_warnings")).warnings) {
      options.push([`episode:${w.episode}`, `warning #${w.episode}: ${w.name}`]);
    }
    target.replaceChildren(
      ...options.map(([value, label]) => {
        const o = doc.createElement("option");
        o.value = value;
        o.textContent = label;
        return o;
      }),
    );
    target.value = options.some(([v]) => v === current) ? current : "batch";
    batch.hidden = target.value !== "batch";
  };
  const drawForm = () => {
    form.hidden = Boolean(model.get("_readonly"));
    author.placeholder = `author (default: ${model.get("_default_author") || "from the environment"})`;
  };

  const submit = () => {
    const body = text.value.trim();
    if (body === "") {
      text.focus();
      return;
    }
    let b: number | null = null;
    let episode: number | null = null;
    if (target.value === "batch") {
      b = Number.parseInt(batch.value, 10);
      if (!Number.isInteger(b) || b < 0) {
        batch.focus();
        return;
      }
    } else if (target.value.startsWith("episode:")) {
      episode = Number(target.value.slice("episode:".length));
    }
    const message: NoteMessage = { kind: "note", text: body, author: author.value.trim(), batch: b, episode };
    model.send(message);
    text.value = "";
  };
  const onChange = () => {
    batch.hidden = target.value !== "batch";
  };
  const onKeydown = (event: KeyboardEvent) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      submit();
    }
  };
  add.addEventListener("click", submit);
  target.addEventListener("change", onChange);
  text.addEventListener("keydown", onKeydown);
  const listeners: [string, () => void][] = [
    ["change:_warnings", drawTargets],
    ["change:_default_author", drawForm],
    ["change:_readonly", drawForm],
  ];
  for (const [event, fn] of listeners) model.on(event, fn);
  drawSummary();
  drawTargets();
  drawForm();

  return {
    el,
    draw(rows) {
      const sorted = [...rows].sort((a, b) => Number(a.note_id) - Number(b.note_id));
      // Called after every applied update: rebuild the list only when a note came or changed
      // (the store replaces a row object only when its row changes), or a long stream's notes
      // would cost DOM nodes and time on every update.
      if (sorted.length === shown.length && sorted.every((row, i) => row === shown[i])) return;
      shown = sorted;
      count = sorted.length;
      drawSummary();
      // The list scrolls (a few hundred notes would push the charts a page down); one read at
      // its end stays at its end, so a note just added is in view.
      const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 4;
      list.replaceChildren(
        ...sorted.map((row) => {
          const li = doc.createElement("li");
          li.className = "calwatch-note";
          li.dataset.noteId = String(row.note_id ?? row.key);
          if (typeof row.batch === "number") li.dataset.batch = String(row.batch);
          const head = doc.createElement("div");
          head.className = "calwatch-note-head";
          head.textContent = noteHeading(row);
          const body = doc.createElement("div");
          body.className = "calwatch-note-body";
          body.textContent = typeof row.text === "string" ? row.text : "";
          li.append(head, body);
          return li;
        }),
      );
      list.hidden = count === 0;
      list.style.paddingLeft = markerRoom(count);
      if (atEnd) list.scrollTop = list.scrollHeight;
    },
    pinTo(b) {
      target.value = "batch";
      batch.hidden = false;
      batch.value = String(b);
      el.open = true;
      text.focus();
    },
    dispose() {
      for (const [event, fn] of listeners) model.off(event, fn);
      add.removeEventListener("click", submit);
      target.removeEventListener("change", onChange);
      text.removeEventListener("keydown", onKeydown);
    },
  };
}
