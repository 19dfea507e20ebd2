import { describe, expect, it } from "vitest";
import type { KeyedRow } from "./model";
import { createNotes, markerRoom } from "./notes";
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

  it("stays at its end when a note comes, unless the reader scrolled up", () => {
    const model = new FakeModel({ _warnings: [], _default_author: "", _readonly: false });
    const notes = createNotes(model);
    const list = notes.el.querySelector<HTMLOListElement>("ol.calwatch-notes-list");
    if (list === null) throw new Error("no list");
    // jsdom lays nothing out: a list 100 px high holding 500 px of notes
    Object.defineProperty(list, "scrollHeight", { configurable: true, get: () => 500 });
    Object.defineProperty(list, "clientHeight", { configurable: true, get: () => 100 });
    const row = (i: number): KeyedRow => ({ key: String(i), note_id: i, text: `n${i}`, author: "a" });
    list.scrollTop = 400; // at the end
    notes.draw([row(0), row(1)]);
    expect(list.scrollTop).toBe(500); // the new note is in view
    list.scrollTop = 120; // reading older notes
    notes.draw([row(0), row(1), row(2)]);
    expect(list.scrollTop).toBe(120); // left where the reader is
    notes.dispose();
  });

  it("leaves room for the widest number", () => {
    expect(markerRoom(0)).toBe("2.5ch");
    expect(markerRoom(9)).toBe("2.5ch");
    expect(markerRoom(244)).toBe("4.5ch");
    const model = new FakeModel({ _warnings: [], _default_author: "", _readonly: false });
    const notes = createNotes(model);
    const rows = Array.from({ length: 120 }, (_, i): KeyedRow => ({ key: String(i), note_id: i, text: "n", author: "a" }));
    notes.draw(rows);
    const list = notes.el.querySelector<HTMLOListElement>("ol.calwatch-notes-list");
    expect(list?.style.paddingLeft).toBe("4.5ch");
    notes.dispose();
  });
});
