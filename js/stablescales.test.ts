import { changeset, parse, type Spec, transforms, View } from "vega";
import { afterEach, describe, expect, it } from "vitest";
import { installStableScales, sameState, scaleState } from "./stablescales";

interface Item {
  x: number;
  datum: { v: number };
}

// One symbol per row of `d`, x from a linear scale whose domain is the data's extent.
const spec: Spec = {
  width: 100,
  height: 10,
  data: [{ name: "d", values: [{ v: 0 }, { v: 10 }] }],
  scales: [{ name: "x", type: "linear", domain: { data: "d", field: "v" }, range: "width", zero: false, nice: false }],
  marks: [{ type: "symbol", name: "dots", from: { data: "d" }, encode: { update: { x: { scale: "x", field: "v" } } } }],
};

const views: View[] = [];
async function render(): Promise<View> {
  const view = new View(parse(spec), { renderer: "none" });
  views.push(view);
  await view.runAsync();
  return view;
}
function items(view: View): Item[] {
  const scene = (view.scenegraph() as unknown as { root: unknown }).root as { items: { items: { name?: string; items: Item[] }[] }[] };
  const mark = scene.items[0]?.items.find((m) => m.name === "dots");
  if (mark === undefined) throw new Error("no dots mark");
  return mark.items;
}
function itemAt(view: View, v: number): Item {
  const item = items(view).find((i) => i.datum.v === v);
  if (item === undefined) throw new Error(`no item for ${v}`);
  return item;
}

afterEach(() => {
  for (const view of views.splice(0)) view.finalize();
});

describe("scaleState / sameState", () => {
  it("compare what a scale maps, by value", async () => {
    const view = await render();
    const x = view.scale("x");
    const state = scaleState(x);
    expect(state).not.toBeNull();
    expect(state).toContainEqual([0, 10]); // domain
    expect(state).toContainEqual([0, 100]); // range
    expect(sameState(state, scaleState(x))).toBe(true);
    expect(sameState(state, scaleState(x.copy().domain([0, 11])))).toBe(false);
    expect(sameState(state, scaleState(x.copy().range([0, 99])))).toBe(false);
    expect(scaleState(null)).toBeNull();
    expect(sameState(null, null)).toBe(false); // no scale yet: always a change
  });
});

describe("installStableScales", () => {
  it("installs once on Vega's scale transform", () => {
    expect(installStableScales()).toBe(true);
    expect(installStableScales()).toBe(true);
    expect(installStableScales({})).toBe(false);
    const proto = (transforms.scale as unknown as { prototype: Record<string, unknown> }).prototype;
    expect((proto.transform as { name: string }).name).toBe("stableTransform");
  });

  it("a row inside the domain re-encodes only itself; one that moves the domain re-encodes all", async () => {
    installStableScales();
    const view = await render();
    expect(itemAt(view, 10).x).toBe(100);
    // Tamper with an encoded item: only a reflow (re-encoding every item) would put it back.
    itemAt(view, 10).x = -1;
    await view.change("d", changeset().insert([{ v: 5 }])).runAsync();
    expect(itemAt(view, 5).x).toBe(50); // the new row is encoded
    expect(itemAt(view, 10).x).toBe(-1); // the old one was left alone: the scale did not change
    await view.change("d", changeset().insert([{ v: 20 }])).runAsync();
    expect(view.scale("x").domain()).toEqual([0, 20]);
    expect(itemAt(view, 10).x).toBe(50); // a new domain re-encodes every item
    expect(itemAt(view, 5).x).toBe(25);
    expect(itemAt(view, 20).x).toBe(100);
    // A width change (the range) re-encodes too.
    await view.width(200).runAsync();
    expect(itemAt(view, 10).x).toBe(100);
  });

  it("removing the row that set the domain moves every item", async () => {
    installStableScales();
    const view = await render();
    await view.change("d", changeset().insert([{ v: 5 }])).runAsync();
    await view.change("d", changeset().remove((d: { v: number }) => d.v === 10)).runAsync();
    expect(view.scale("x").domain()).toEqual([0, 5]);
    expect(itemAt(view, 5).x).toBe(100);
    expect(itemAt(view, 0).x).toBe(0);
  });
});
