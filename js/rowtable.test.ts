import { describe, expect, it } from "vitest";
import { parseRowsMessage, type RowsMessage } from "./model";
import { createRowTable, nextSliceFilter, PAGE_SIZE, rowsTitle } from "./rowtable";
import { FakeModel } from "./test-utils";

const COLUMNS = ["id", "prediction", "confidence", "set", "risk", "label"];

function reply(
  batch: number,
  page: number,
  nRows: number,
  classFilter?: string,
  sliceFilter?: string,
): RowsMessage {
  const first = page * PAGE_SIZE;
  const n = Math.max(0, Math.min(PAGE_SIZE, nRows - first));
  return {
    kind: "rows",
    view: "v1",
    batch,
    page,
    page_size: PAGE_SIZE,
    n_rows: nRows,
    n_pages: Math.max(1, Math.ceil(nRows / PAGE_SIZE)),
    columns: COLUMNS,
    rows: Array.from({ length: n }, (_, i) => [`b${batch}-${first + i}`, "cat", 0.9, ["cat"], 0.1, "dog"]),
    set_calibrator: "lac",
    risk_calibrator: "",
    ...(classFilter === undefined ? {} : { class_filter: classFilter }),
    ...(sliceFilter === undefined ? {} : { slice_filter: sliceFilter }),
  };
}

describe("rowsTitle", () => {
  it("names the batch, the class filter and the rows shown", () => {
    expect(rowsTitle({ batch: 12, page: 0, page_size: 20, n_rows: 37, class_filter: "cat" })).toBe(
      "Batch 12 · class cat: rows 1–20 of 37",
    );
    expect(rowsTitle({ batch: 12, page: 1, page_size: 20, n_rows: 37, class_filter: "cat" })).toBe(
      "Batch 12 · class cat: rows 21–37 of 37",
    );
    expect(rowsTitle({ batch: 5, page: 0, page_size: 20, n_rows: 4000, class_filter: "" })).toBe(
      "Batch 5: rows 1–20 of 4,000",
    );
    expect(rowsTitle({ batch: 5, page: 0, page_size: 20, n_rows: 400 })).toBe("Batch 5: rows 1–20 of 400");
    // A batch observed under a name of its own is shown by it, with its index.
    expect(rowsTitle({ batch: 12, batch_name: "2009 #12", page: 0, page_size: 20, n_rows: 40 })).toBe(
      "Batch 12 (2009 #12): rows 1–20 of 40",
    );
    expect(rowsTitle({ batch: 12, batch_name: "12", page: 0, page_size: 20, n_rows: 40 })).toBe(
      "Batch 12: rows 1–20 of 40",
    );
    expect(rowsTitle({ batch: 3, page: 0, page_size: 20, n_rows: 0, class_filter: "owl" })).toBe(
      "Batch 3 · class owl: no rows",
    );
  });
});

describe("parseRowsMessage", () => {
  it("keeps the class filter of the reply when it is a string", () => {
    expect(parseRowsMessage({ ...reply(1, 0, 3), class_filter: "cat" })?.class_filter).toBe("cat");
    expect(parseRowsMessage({ ...reply(1, 0, 3), class_filter: "" })?.class_filter).toBe("");
    expect(parseRowsMessage({ ...reply(1, 0, 3), class_filter: 3 })).not.toHaveProperty("class_filter");
    expect(parseRowsMessage(reply(1, 0, 3))).not.toHaveProperty("class_filter");
  });

  it("keeps the batch's name (the parser drops fields it does not know)", () => {
    expect(parseRowsMessage({ ...reply(1, 0, 3), batch_name: "2009 #12" })?.batch_name).toBe("2009 #12");
    expect(parseRowsMessage({ ...reply(1, 0, 3), batch_name: 12 })).not.toHaveProperty("batch_name");
  });
});

describe("createRowTable with a class filter", () => {
  function setup() {
    const model = new FakeModel({ _class_filter: "" });
    const table = createRowTable(model, "v1", document);
    document.body.append(table.el);
    const title = () => table.el.querySelector(".calwatch-rows-title")?.textContent;
    const requests = () =>
      model.sent.map((m) => {
        const { batch, page } = m as { batch: number; page: number };
        return [batch, page];
      });
    return { model, table, title, requests };
  }

  /** What the class picker does: set the trait, then save it. */
  function pick(model: FakeModel, cls: string) {
    model.set("_class_filter", cls);
    model.save_changes();
  }
  const task = () => new Promise((r) => setTimeout(r, 0));

  it("shows the reply's class filter in the caption and re-requests the open batch when it changes", async () => {
    const { model, table, title, requests } = setup();
    pick(model, "cat");
    await task();
    expect(model.sent).toEqual([]); // nothing open: nothing to request
    table.open(12);
    expect(model.sent).toEqual([
      {
        kind: "rows-request",
        view: "v1",
        batch: 12,
        page: 0,
        page_size: PAGE_SIZE,
        class_filter: "cat",
        slice_filter: "",
      },
    ]);
    expect(title()).toBe("Batch 12 · class cat: loading rows…");
    table.receive(reply(12, 0, 37, "cat"));
    expect(title()).toBe("Batch 12 · class cat: rows 1–20 of 37");
    expect(table.el.dataset.classFilter).toBe("cat");
    expect(table.el.dataset.loading).toBeUndefined();
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-next")?.click();
    table.receive(reply(12, 1, 37, "cat"));
    expect(title()).toBe("Batch 12 · class cat: rows 21–37 of 37");
    expect(table.el.querySelectorAll("tbody tr")).toHaveLength(17);

    // another class: other rows, so the batch again from its first page, asked once the picker
    // has saved the trait (a kernel reading its trait must see the new class first)
    const saves: number[] = [];
    const send = model.send.bind(model);
    model.send = (content: unknown) => {
      saves.push(model.saves);
      send(content);
    };
    const before = model.saves;
    pick(model, "dog");
    expect(table.el.dataset.loading).toBe("true");
    expect(requests()).toHaveLength(2);
    await task();
    expect(saves).toEqual([before + 1]);
    expect(requests()).toEqual([
      [12, 0],
      [12, 1],
      [12, 0],
    ]);
    expect(model.sent[2]).toMatchObject({ class_filter: "dog" });
    expect(title()).toBe("Batch 12 · class dog: loading rows…");
    table.receive(reply(12, 0, 5, "dog"));
    expect(title()).toBe("Batch 12 · class dog: rows 1–5 of 5");
    expect(table.el.dataset.classFilter).toBe("dog");
    expect(table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-next")?.disabled).toBe(true);

    // no filter: the caption says nothing of classes
    pick(model, "");
    await task();
    expect(model.sent[3]).toMatchObject({ batch: 12, page: 0, class_filter: "" });
    table.receive(reply(12, 0, 400, ""));
    expect(title()).toBe("Batch 12: rows 1–20 of 400");
    expect(table.el.dataset.classFilter).toBe("");

    // closed: a filter change requests nothing
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-close")?.click();
    const sent = model.sent.length;
    pick(model, "owl");
    await task();
    expect(model.sent).toHaveLength(sent);
    // two changes in a row ask once, for the last class
    table.open(3);
    pick(model, "cat");
    pick(model, "yak");
    await task();
    expect(model.sent.slice(sent)).toMatchObject([
      { batch: 3, page: 0, class_filter: "owl" },
      { batch: 3, page: 0, class_filter: "yak" },
    ]);
    table.dispose();
    expect(model.listenerCount("change:_class_filter")).toBe(0);
  });

  it("works with a kernel that does not name the class filter, and says so in an error", () => {
    const { model, table, title } = setup();
    table.open(4);
    table.receive(reply(4, 0, 30));
    expect(title()).toBe("Batch 4: rows 1–20 of 30");
    model.set("_class_filter", "cat");
    table.receive({ ...reply(4, 0, 0, "cat"), error: "batch 4 left the window" });
    expect(title()).toBe("Batch 4 · class cat");
    expect(table.el.querySelector(".calwatch-rows-message")?.textContent).toBe(
      "Its rows cannot be shown: batch 4 left the window",
    );
    table.dispose();
  });
});

describe("the slice filter", () => {
  const B6 = "carrier = B6";
  const PAIR = "carrier = B6 & hour ≥ 18";

  function setup(state: Record<string, unknown> = {}) {
    const model = new FakeModel({ _class_filter: "", ...state });
    const table = createRowTable(model, "v1", document);
    document.body.append(table.el);
    const title = () => table.el.querySelector(".calwatch-rows-title")?.textContent;
    const unslice = () => table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-unslice");
    const last = () => model.sent[model.sent.length - 1] as Record<string, unknown>;
    return { model, table, title, unslice, last };
  }

  it("names the slice in the caption, after the class", () => {
    const page = { page: 0, page_size: 20 };
    expect(rowsTitle({ batch: 12, ...page, n_rows: 37, slice_filter: B6 })).toBe(
      "Batch 12 · carrier = B6: rows 1–20 of 37",
    );
    expect(rowsTitle({ batch: 12, ...page, n_rows: 37, class_filter: "cat", slice_filter: PAIR })).toBe(
      "Batch 12 · class cat · carrier = B6 & hour ≥ 18: rows 1–20 of 37",
    );
    expect(rowsTitle({ batch: 12, ...page, n_rows: 0, slice_filter: B6 })).toBe("Batch 12 · carrier = B6: no rows");
    expect(rowsTitle({ batch: 12, ...page, n_rows: 3, slice_filter: "" })).toBe("Batch 12: rows 1–3 of 3");
  });

  it("a click on the same slice clears it, another slice replaces it", () => {
    expect(nextSliceFilter("", B6)).toBe(B6);
    expect(nextSliceFilter(B6, B6)).toBe("");
    expect(nextSliceFilter(B6, PAIR)).toBe(PAIR);
  });

  it("keeps the reply's slice filter when it is a string", () => {
    expect(parseRowsMessage({ ...reply(1, 0, 3), slice_filter: B6 })?.slice_filter).toBe(B6);
    expect(parseRowsMessage({ ...reply(1, 0, 3), slice_filter: 3 })).not.toHaveProperty("slice_filter");
  });

  it("filters the open batch from its first page, shows it, and clears with ✕ slice or a second click", () => {
    const { model, table, title, unslice, last } = setup();
    expect(unslice()?.hidden).toBe(true);
    table.open(12);
    table.receive(reply(12, 0, 400, ""));
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-next")?.click();
    table.receive(reply(12, 1, 400, ""));
    table.filterSlice(B6);
    expect(last()).toMatchObject({ batch: 12, page: 0, slice_filter: B6 });
    expect(title()).toBe("Batch 12 · carrier = B6: loading rows…");
    expect(unslice()?.hidden).toBe(false);
    expect(table.sliceFilter).toBe(B6);
    table.receive(reply(12, 0, 37, "", B6));
    expect(title()).toBe("Batch 12 · carrier = B6: rows 1–20 of 37");
    expect(table.el.dataset.sliceFilter).toBe(B6);
    // pages keep the slice
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-next")?.click();
    expect(last()).toMatchObject({ batch: 12, page: 1, slice_filter: B6 });
    table.receive(reply(12, 1, 37, "", B6));
    expect(title()).toBe("Batch 12 · carrier = B6: rows 21–37 of 37");
    // a pair: rows in both
    table.filterSlice(PAIR);
    expect(last()).toMatchObject({ batch: 12, page: 0, slice_filter: PAIR });
    table.receive(reply(12, 0, 4, "", PAIR));
    expect(title()).toBe("Batch 12 · carrier = B6 & hour ≥ 18: rows 1–4 of 4");
    // ✕ slice: every row of the batch again
    unslice()?.click();
    expect(last()).toMatchObject({ batch: 12, page: 0, slice_filter: "" });
    expect(unslice()?.hidden).toBe(true);
    table.receive(reply(12, 0, 400, "", ""));
    expect(title()).toBe("Batch 12: rows 1–20 of 400");
    // a second click on the same slice clears it too
    table.filterSlice(B6);
    table.receive(reply(12, 0, 37, "", B6));
    table.filterSlice(B6);
    expect(last()).toMatchObject({ batch: 12, page: 0, slice_filter: "" });
    expect(table.sliceFilter).toBe("");
    table.receive(reply(12, 0, 400, "", ""));
    expect(title()).toBe("Batch 12: rows 1–20 of 400");
    // another batch clicked on the timeline keeps the slice in force
    table.filterSlice(B6);
    table.open(7);
    expect(last()).toMatchObject({ batch: 7, page: 0, slice_filter: B6 });
    table.dispose();
  });

  it("with no batch open asks for the newest batch holding rows of the slice, and shows the one named", () => {
    const { model, table, title, unslice, last } = setup();
    expect(table.el.hidden).toBe(true);
    table.filterSlice(B6);
    expect(table.el.hidden).toBe(false);
    expect(last()).toMatchObject({ kind: "rows-request", batch: null, page: 0, slice_filter: B6 });
    expect(title()).toBe("carrier = B6: finding the newest batch with its rows…");
    // a late reply to an earlier request (another slice) is not the answer
    table.receive(reply(3, 0, 10, "", ""));
    expect(table.el.dataset.loading).toBe("true");
    table.receive(reply(9, 0, 37, "", B6));
    expect(table.el.dataset.batch).toBe("9");
    expect(title()).toBe("Batch 9 · carrier = B6: rows 1–20 of 37");
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-next")?.click();
    expect(last()).toMatchObject({ batch: 9, page: 1, slice_filter: B6 });
    // closing the table clears the slice: opened again, it shows every row
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-close")?.click();
    expect(table.el.hidden).toBe(true);
    expect(table.sliceFilter).toBe("");
    expect(unslice()?.hidden).toBe(true);
    table.open(4);
    expect(last()).toMatchObject({ batch: 4, slice_filter: "" });
    // a kernel with no batch in the window says so
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-close")?.click();
    table.filterSlice(PAIR);
    table.receive({ ...reply(-1, 0, 0, "", PAIR), error: "no batch is in the window: no rows to show" });
    expect(title()).toBe(PAIR);
    expect(table.el.querySelector(".calwatch-rows-message")?.textContent).toBe(
      "Its rows cannot be shown: no batch is in the window: no rows to show",
    );
    unslice()?.click(); // the clear button still works without a batch
    expect(table.sliceFilter).toBe("");
    const sent = model.sent.length;
    table.el.querySelector<HTMLButtonElement>("button.calwatch-rows-close")?.click();
    expect(table.el.hidden).toBe(true);
    expect(model.sent).toHaveLength(sent);
    table.dispose();
  });

  it("tells the view each change of the slice (set, replaced, cleared), never a repeat", () => {
    const model = new FakeModel({ _class_filter: "" });
    const changes: string[] = [];
    const table = createRowTable(model, "v1", document, { onSlice: (s) => changes.push(s) });
    const button = (name: string) => table.el.querySelector<HTMLButtonElement>(`button.calwatch-rows-${name}`);
    table.filterSlice(B6); // none open: the newest batch with its rows
    table.receive(reply(9, 0, 37, "", B6));
    table.filterSlice(PAIR);
    table.filterSlice(PAIR); // a second click clears it
    table.filterSlice(B6);
    button("unslice")?.click();
    button("unslice")?.click(); // hidden, and nothing to clear: no change
    table.filterSlice(B6);
    button("close")?.click(); // closing the table clears it
    button("close")?.click();
    table.open(3); // a batch opened without a slice: no change
    expect(changes).toEqual([B6, PAIR, "", B6, "", B6, ""]);
    table.dispose();
    const report = createRowTable(new FakeModel({ _readonly: true }), "v2", document, {
      onSlice: (s) => changes.push(s),
    });
    report.filterSlice(B6); // a report keeps no raw rows: no slice, no series
    expect(changes).toHaveLength(7);
    report.dispose();
  });

  it("does nothing in a read-only report (no raw rows)", () => {
    const { model, table } = setup({ _readonly: true });
    table.filterSlice(B6);
    expect(model.sent).toEqual([]);
    expect(table.el.hidden).toBe(true);
    expect(table.sliceFilter).toBe("");
    table.dispose();
  });
});
