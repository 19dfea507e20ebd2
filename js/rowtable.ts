// The row table of a clicked batch: a small paged table of the window's raw rows (id,
// prediction, set, risk, label), fetched page by page from the kernel (`rows-request` ->
// `rows`). Browser-only UI state (per view): which batch and page is open. Hidden in a read-only
// report, which has no raw rows. Every text goes through textContent.
//
// The kernel picks the rows by the class filter (`_class_filter`: rows predicted as or labelled
// that class) and names it in its reply (`class_filter`); the caption says so, and a change of
// the filter re-requests the open batch from its first page (the rows, hence the pages, differ).
//
// A slice filter (a click on a slice of the Slices view: `filterSlice`) is this view's own: the
// words of a slice of `mon.slices()` ("carrier = B6", or a pair "carrier = B6 & hour ≥ 18"),
// sent with each request (`slice_filter`) and named in the reply and the caption. It keeps the
// open batch; with none open it asks for the newest window batch holding rows of the slice
// (`batch: null`). The "✕ slice" button, a click on the same slice again, or closing the table
// clears it. Each change goes to the view (`onSlice`), which draws the slice's coverage over time
// on the coverage chart too (the kernel's `slice_coverage`, asked for with `slice-filter`).

import type { AnyModel } from "@anywidget/types";
import type { RowsMessage, RowsRequest, WidgetModel } from "./model";

export const PAGE_SIZE = 20;
const int = new Intl.NumberFormat("en-US");

/** A cell's text: numbers to 4 decimals, sets as {a, b}, null as "—" (not yet known). */
export function cellText(column: string, value: unknown): string {
  if (value === null || value === undefined) return column === "label" ? "(no label yet)" : "—";
  if (Array.isArray(value)) return `{${value.map(String).join(", ")}}`;
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4);
  return String(value);
}

/**
 * "Batch 12 · class cat · carrier = B6": the batch and the filters its rows were picked by
 * ("Batch 12" without any).
 */
export function rowsHead(
  batch: number,
  classFilter: string | undefined,
  batchName?: string,
  sliceFilter?: string,
): string {
  const named = batchName !== undefined && batchName !== "" && batchName !== String(batch);
  let head = named ? `Batch ${batch} (${batchName})` : `Batch ${batch}`; // as the report and the cards say it
  if (classFilter) head += ` · class ${classFilter}`;
  if (sliceFilter) head += ` · ${sliceFilter}`;
  return head;
}

/**
 * The caption of a page: "Batch 12 · carrier = B6: rows 1–20 of 37" ("Batch 12: …" without a
 * filter; "no rows" for none).
 */
export function rowsTitle(
  msg: Pick<RowsMessage, "batch" | "batch_name" | "page" | "page_size" | "n_rows" | "class_filter" | "slice_filter">,
): string {
  const head = rowsHead(msg.batch, msg.class_filter, msg.batch_name, msg.slice_filter);
  if (msg.n_rows === 0) return `${head}: no rows`;
  const first = msg.page * msg.page_size + 1;
  const last = Math.min(msg.n_rows, (msg.page + 1) * msg.page_size);
  return `${head}: rows ${int.format(first)}–${int.format(last)} of ${int.format(msg.n_rows)}`;
}

/** The slice filter after a click on `clicked`: that slice, or none when it was already the filter. */
export function nextSliceFilter(current: string, clicked: string): string {
  return clicked === current ? "" : clicked;
}

export interface RowTable {
  readonly el: HTMLElement;
  /** Opens (or switches to) a batch's first page (under the slice filter in force, if any). */
  open(batch: number): void;
  /**
   * A click on a slice: filters the rows to it (a second click on the same slice clears it), in
   * the open batch, or the newest window batch holding rows of it when none is open. Nothing in
   * a read-only report (no raw rows).
   */
  filterSlice(slice: string): void;
  /** The slice the rows are filtered to ("" = none). */
  readonly sliceFilter: string;
  /** Handles a kernel `rows` message (those for other views are ignored). */
  receive(msg: RowsMessage): void;
  dispose(): void;
}

export interface RowTableOptions {
  onNote?: (batch: number) => void;
  /** The slice filter changed (set, replaced or cleared: "" = none); not called without a change. */
  onSlice?: (slice: string) => void;
}

export function createRowTable(
  model: AnyModel<WidgetModel>,
  viewId: string,
  doc: Document = document,
  options: RowTableOptions = {},
): RowTable {
  const el = doc.createElement("div");
  el.className = "calwatch-rows";
  el.hidden = true;
  el.setAttribute("role", "region");
  el.setAttribute("aria-label", "Rows of a batch");
  const head = doc.createElement("div");
  head.className = "calwatch-rows-head";
  const title = doc.createElement("span");
  title.className = "calwatch-rows-title";
  const prev = doc.createElement("button");
  prev.type = "button";
  prev.className = "calwatch-rows-prev";
  prev.textContent = "‹ prev";
  const next = doc.createElement("button");
  next.type = "button";
  next.className = "calwatch-rows-next";
  next.textContent = "next ›";
  const note = doc.createElement("button");
  note.type = "button";
  note.className = "calwatch-rows-note";
  note.textContent = "Note…";
  const close = doc.createElement("button");
  close.type = "button";
  close.className = "calwatch-rows-close";
  close.textContent = "✕";
  close.setAttribute("aria-label", "Close the row table");
  const unslice = doc.createElement("button");
  unslice.type = "button";
  unslice.className = "calwatch-rows-unslice";
  unslice.textContent = "✕ slice";
  unslice.title = "Show every row of the batch (clear the slice filter)";
  unslice.setAttribute("aria-label", "Clear the slice filter");
  unslice.hidden = true;
  head.append(title, unslice, prev, next, note, close);
  const message = doc.createElement("div");
  message.className = "calwatch-rows-message";
  const scroller = doc.createElement("div");
  scroller.className = "calwatch-rows-scroll";
  const table = doc.createElement("table");
  table.className = "calwatch-rows-table";
  scroller.append(table);
  el.append(head, message, scroller);

  /** The batch shown, or asked for (null: none, or the newest holding rows of the slice, asked). */
  let batch: number | null = null;
  let page = 0;
  let nPages = 1;
  /** The slice the rows are filtered to ("" = none): this view's own, sent with each request. */
  let slice = "";
  /** Asked for the newest window batch with rows of `slice`: its reply names the batch. */
  let awaitingNewest = false;

  const setSlice = (next: string) => {
    const changed = next !== slice;
    slice = next;
    unslice.hidden = slice === "";
    el.dataset.slicePicked = slice;
    if (changed) options.onSlice?.(slice);
  };

  const request = (b: number | null, p: number) => {
    batch = b;
    page = p;
    awaitingNewest = b === null;
    const msg: RowsRequest = {
      kind: "rows-request",
      view: viewId,
      batch: b,
      page: p,
      page_size: PAGE_SIZE,
      class_filter: model.get("_class_filter") ?? "",
      slice_filter: slice,
    };
    el.dataset.batch = b === null ? "" : String(b);
    el.dataset.loading = "true";
    title.textContent =
      b === null
        ? `${slice || "Rows"}: finding the newest batch with its rows…`
        : `${rowsHead(b, model.get("_class_filter"), undefined, slice)}: loading rows…`;
    model.send(msg);
  };

  /** The open batch again from its first page (the slice changed), or the newest one asked again. */
  const reload = () => {
    if (el.hidden) return;
    if (batch !== null) request(batch, 0);
    else if (awaitingNewest) request(null, 0);
  };

  const onClick = (event: Event) => {
    if (event.target === close) {
      el.hidden = true;
      batch = null;
      awaitingNewest = false;
      setSlice(""); // a table opened again starts with every row
      return;
    }
    if (event.target === unslice) {
      setSlice("");
      reload();
      return;
    }
    if (batch === null) return;
    if (event.target === prev && page > 0) request(batch, page - 1);
    else if (event.target === next && page < nPages - 1) request(batch, page + 1);
    else if (event.target === note) options.onNote?.(batch);
  };
  head.addEventListener("click", onClick);
  // The kernel filters the rows by class: another class means other rows and pages. Asked in a
  // task of its own, after the code that changed the filter has saved it (the class picker sets
  // the trait, then saves): a kernel reading the filter off its trait gets the new one first.
  let refetch: ReturnType<typeof setTimeout> | null = null;
  const onClassFilter = () => {
    if (batch === null || el.hidden) return;
    el.dataset.loading = "true";
    if (refetch !== null) clearTimeout(refetch);
    refetch = setTimeout(() => {
      refetch = null;
      if (batch !== null && !el.hidden) request(batch, 0);
    }, 0);
  };
  model.on("change:_class_filter", onClassFilter);

  return {
    el,
    open(b) {
      if (model.get("_readonly")) return; // a report keeps no raw rows
      el.hidden = false;
      request(b, 0);
    },
    filterSlice(clicked) {
      if (model.get("_readonly") || clicked === "") return; // a report keeps no raw rows
      setSlice(nextSliceFilter(slice, clicked));
      if (!el.hidden && (batch !== null || awaitingNewest)) reload();
      else if (slice !== "") {
        el.hidden = false;
        request(null, 0);
      }
    },
    get sliceFilter() {
      return slice;
    },
    receive(msg) {
      if (msg.view !== viewId) return;
      if (awaitingNewest) {
        // The answer to "the newest batch with rows of the slice" names the batch; replies to
        // requests made before it (another slice) are not it.
        if ((msg.slice_filter ?? "") !== slice) return;
        awaitingNewest = false;
        if (msg.batch >= 0) {
          batch = msg.batch;
          el.dataset.batch = String(batch);
        }
      } else if (msg.batch !== batch) return;
      // A reply to a request made before a filter changed is shown until the re-request's
      // arrives: its caption names the class and slice its rows were picked by, so it never misleads.
      delete el.dataset.loading;
      el.dataset.classFilter = msg.class_filter ?? "";
      el.dataset.sliceFilter = msg.slice_filter ?? "";
      el.dataset.page = String(msg.page);
      if (msg.error !== undefined) {
        title.textContent =
          msg.batch >= 0
            ? rowsHead(msg.batch, msg.class_filter, msg.batch_name, msg.slice_filter)
            : msg.slice_filter || "Rows";
        message.textContent = `Its rows cannot be shown: ${msg.error}`;
        message.hidden = false;
        table.replaceChildren();
        prev.disabled = next.disabled = true;
        return;
      }
      page = msg.page;
      nPages = msg.n_pages;
      title.textContent = rowsTitle(msg);
      const parts = [];
      if (msg.set_calibrator !== "") parts.push(`sets of ${msg.set_calibrator}`);
      if (msg.risk_calibrator !== "") parts.push(`risk of ${msg.risk_calibrator}`);
      message.textContent = parts.join(" · ");
      message.hidden = parts.length === 0;
      prev.disabled = page <= 0;
      next.disabled = page >= nPages - 1;
      const thead = doc.createElement("thead");
      const hr = doc.createElement("tr");
      for (const c of msg.columns) {
        const th = doc.createElement("th");
        th.textContent = c;
        hr.append(th);
      }
      thead.append(hr);
      const tbody = doc.createElement("tbody");
      for (const row of msg.rows) {
        const tr = doc.createElement("tr");
        msg.columns.forEach((c, i) => {
          const td = doc.createElement("td");
          td.dataset.column = c;
          td.textContent = cellText(c, row[i]);
          tr.append(td);
        });
        tbody.append(tr);
      }
      table.replaceChildren(thead, tbody);
    },
    dispose() {
      head.removeEventListener("click", onClick);
      model.off("change:_class_filter", onClassFilter);
      if (refetch !== null) clearTimeout(refetch);
    },
  };
}
