import { describe, expect, it } from "vitest";
import type { KeyedRow } from "./model";
import { createNotes } from "./notes";
import { FakeModel } from "./test-utils";

describe("notes list", () => {
  it("rebuilds its items only when a note came or changed", () => {
    const model = new FakeModel({ _warnings: [], _default_author: "", _readonly: false });
    const notes = createNotes(model);
    const first: KeyedRow = { key: "0", note_id: 0, batch: 3, text: "drift?", author: "ana" };
    const second: KeyedRow = { key: "1", note_id: 1, text: "fixed", author: "bo" };
    notes.draw([first]);
    const item = notes.el.querySelector("li.calwatch-note");
    expect(item?.getAttribute("data-note-id")).toBe("0");
    notes.draw([first]); // the same rows after another update: the same element
    expect(notes.el.querySelector("li.calwatch-note")).toBe(item);
    notes.draw([second, first]); // a new note: both, in note order
    const ids = [...notes.el.querySelectorAll("li.calwatch-note")].map((li) => li.getAttribute("data-note-id"));
    expect(ids).toEqual(["0", "1"]);
    notes.draw([first, { ...second, text: "fixed for good" }]); // an edited row object
    expect(notes.el.querySelectorAll(".calwatch-note-body")[1]?.textContent).toBe("fixed for good");
    notes.draw([]);
    expect(notes.el.querySelectorAll("li.calwatch-note").length).toBe(0);
    notes.dispose();
  });
});
