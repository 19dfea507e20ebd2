import { describe, expect, it } from "vitest";
import { parseRowsMessage, type RowsMessage } from "./model";
import { createRowTable, PAGE_SIZE, rowsTitle } from "./rowtable";
import { FakeModel } from "./test-utils";

const COLUMNS = ["id", "prediction", "confidence", "set", "risk", "label"];

function reply(batch: number, page: number, nRows: number, classFilter?: string): RowsMessage {
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
      "2009 #12 (batch 12): rows 1–20 of 40",
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
      { kind: "rows-request", view: "v1", batch: 12, page: 0, page_size: PAGE_SIZE, class_filter: "cat" },
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
