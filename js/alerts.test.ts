import { afterEach, describe, expect, it } from "vitest";
import {
  bannered,
  createAlerts,
  formatAck,
  formatBatches,
  formatCount,
  formatNumber,
  formatRows,
  MAX_BANNERS,
} from "./alerts";
import { parseWarnings, type ShiftWarning } from "./model";
import { FakeModel } from "./test-utils";

function warning(episode: number, over: Partial<ShiftWarning> = {}): ShiftWarning {
  return {
    episode,
    name: `monitor-${episode}`,
    threatens: "marginal coverage of 90%",
    explanation: `Coverage dropped in episode ${episode}.`,
    action: "recalibrate on recent labelled data",
    statistic: 23.456,
    threshold: 20,
    false_alarm_control: "false alarms at most 5% over the whole stream (Ville)",
    first_batch: 10 + episode,
    last_batch: 10 + episode,
    open: true,
    acknowledged: false,
    ack_note: "",
    ack_by: "",
    ack_at: "",
    ...over,
  };
}

const disposers: (() => void)[] = [];
afterEach(() => {
  for (const d of disposers.splice(0)) d();
  document.body.replaceChildren();
});

function setup(warnings?: unknown) {
  const model = new FakeModel(warnings === undefined ? {} : { _warnings: warnings as ShiftWarning[] });
  const errors: string[] = [];
  const alerts = createAlerts(model, document, { onError: (m) => errors.push(m) });
  disposers.push(() => alerts.dispose());
  document.body.append(alerts.el);
  const el = alerts.el;
  const banners = () => [...el.querySelectorAll<HTMLElement>("div.calwatch-warning")];
  const episodes = () => banners().map((b) => Number(b.dataset.episode));
  const banner = (episode: number) => {
    const b = el.querySelector<HTMLElement>(`div.calwatch-warning[data-episode="${episode}"]`);
    if (b === null) throw new Error(`no banner for episode ${episode}`);
    const q = <T extends Element>(sel: string) => {
      const e = b.querySelector<T>(sel);
      if (e === null) throw new Error(`missing ${sel}`);
      return e;
    };
    return {
      el: b,
      ack: q<HTMLButtonElement>("button.calwatch-ack"),
      form: q<HTMLElement>(".calwatch-ack-form"),
      note: q<HTMLInputElement>("input.calwatch-ack-note"),
      ok: q<HTMLButtonElement>("button.calwatch-ack-ok"),
      cancel: q<HTMLButtonElement>("button.calwatch-ack-cancel"),
      details: q<HTMLDetailsElement>("details"),
    };
  };
  const more = () => el.querySelector<HTMLButtonElement>("button.calwatch-more") as HTMLButtonElement;
  const toggle = () => el.querySelector<HTMLButtonElement>("button.calwatch-warning-toggle") as HTMLButtonElement;
  const log = () => el.querySelector<HTMLElement>("div.calwatch-warning-log") as HTMLElement;
  return { model, alerts, el, errors, banners, episodes, banner, more, toggle, log };
}

describe("formatting", () => {
  it("formats batches: since N while open, a range once closed", () => {
    expect(formatBatches({ first_batch: 12, last_batch: 15, open: true })).toBe("since batch 12");
    expect(formatBatches({ first_batch: 12, last_batch: 15, open: false })).toBe("batches 12–15");
    expect(formatBatches({ first_batch: 12, last_batch: 12, open: false })).toBe("batch 12");
    expect(formatBatches({ first_batch: Number.NaN, last_batch: 3, open: false })).toBe("");
  });

  it("formats numbers with 4 significant digits, exponents for extremes, n/a for NaN", () => {
    expect(formatNumber(23.456)).toBe("23.46");
    expect(formatNumber(20)).toBe("20");
    expect(formatNumber(0.05)).toBe("0.05");
    expect(formatNumber(1234567)).toBe("1.23e+6");
    expect(formatNumber(0.00001234)).toBe("1.23e-5");
    expect(formatNumber(0)).toBe("0");
    expect(formatNumber(Number.NaN)).toBe("n/a");
    expect(formatNumber(Number.POSITIVE_INFINITY)).toBe("∞");
  });

  it("formats the stream rows involved when the kernel sends them", () => {
    expect(formatRows({ first_row: 1200, last_row: 1499 })).toBe("rows 1,200–1,499");
    expect(formatRows({ first_row: 7, last_row: 7 })).toBe("row 7");
    expect(formatRows({ first_row: 7 })).toBe("from row 7");
    expect(formatRows({})).toBe("");
  });

  it("counts warnings and open ones, with a singular", () => {
    expect(formatCount([warning(1), warning(2, { open: false }), warning(3, { acknowledged: true })])).toBe(
      "3 warnings (1 open, 1 acknowledged)",
    );
    expect(formatCount([warning(1), warning(2)])).toBe("2 warnings (2 open)");
    expect(formatCount([warning(1, { open: false })])).toBe("1 warning (0 open)");
  });

  it("describes an acknowledgement with the parts the kernel filled in", () => {
    const ack = { acknowledged: true, ack_by: "ana", ack_at: "2025-05-01T10:00:00Z", ack_note: "known outage" };
    expect(formatAck(ack)).toBe("acknowledged by ana at 2025-05-01T10:00:00Z — known outage");
    expect(formatAck({ ...ack, ack_note: "", ack_at: "" })).toBe("acknowledged by ana");
    expect(formatAck({ ...ack, acknowledged: false })).toBe("");
  });

  it("banners open, unacknowledged warnings only, most recent first", () => {
    const list = [
      warning(1),
      warning(2, { open: false }),
      warning(3, { acknowledged: true }),
      warning(4),
      warning(5, { open: false, acknowledged: true }),
    ];
    expect(bannered(list).map((w) => w.episode)).toEqual([4, 1]);
    expect(list.map((w) => w.episode)).toEqual([1, 2, 3, 4, 5]); // input not reordered
  });
});

describe("parseWarnings", () => {
  it("treats a missing trait as an empty list", () => {
    expect(parseWarnings(undefined)).toEqual({ warnings: [], problems: [] });
    expect(parseWarnings(null)).toEqual({ warnings: [], problems: [] });
  });

  it("keeps valid entries as they are", () => {
    const list = [warning(1), warning(2, { statistic: 0.5 })];
    expect(parseWarnings(list)).toEqual({ warnings: list, problems: [] });
  });

  it("drops entries without an integer episode or repeating one, and reports them", () => {
    const { warnings, problems } = parseWarnings([warning(1), { name: "x" }, "junk", warning(1), warning(2)]);
    expect(warnings.map((w) => w.episode)).toEqual([1, 2]);
    expect(problems).toEqual([
      '_warnings[1] has no integer "episode"',
      '_warnings[2] has no integer "episode"',
      "_warnings[3] repeats episode 1",
    ]);
    expect(parseWarnings({ episode: 1 }).problems).toEqual(["_warnings must be an array"]);
  });

  it("accepts the kernel's nulls: ack fields before acknowledgement, a non-finite statistic, no rows", () => {
    const raw = { ...warning(5), ack_note: null, ack_by: null, ack_at: null, statistic: null, first_row: null };
    const { warnings, problems } = parseWarnings([raw, { ...warning(6), first_row: 100, last_row: 180 }]);
    expect(problems).toEqual([]);
    expect(warnings[0]).toMatchObject({ ack_note: "", ack_by: "", ack_at: "" });
    expect(warnings[0]?.statistic).toBeNaN();
    expect(warnings[0]).not.toHaveProperty("first_row");
    expect(warnings[1]).toMatchObject({ first_row: 100, last_row: 180 });
    expect(parseWarnings([{ ...warning(7), ack_by: 3, last_row: "x" }]).problems).toEqual([
      "warning episode 7: bad or missing ack_by, last_row",
    ]);
  });

  it("defaults fields of the wrong type and names them; a null statistic is fine", () => {
    const { warnings, problems } = parseWarnings([
      { ...warning(3), name: 5, open: "yes", first_batch: 1.5, statistic: null },
    ]);
    expect(warnings[0]).toMatchObject({ episode: 3, name: "", open: false, threshold: 20 });
    expect(warnings[0]?.first_batch).toBeNaN();
    expect(warnings[0]?.statistic).toBeNaN();
    expect(problems).toEqual(["warning episode 3: bad or missing name, first_batch, open"]);
  });
});

describe("createAlerts", () => {
  it("is hidden and silent when the kernel sends no _warnings", () => {
    const { el, banners, toggle, errors } = setup();
    expect(el.hidden).toBe(true);
    expect(banners()).toHaveLength(0);
    expect(toggle().hidden).toBe(true);
    expect(errors.every((e) => e === "")).toBe(true);
  });

  it("shows each warning as one line (what, since when) that expands to the full text and actions", () => {
    const { banner } = setup([warning(1, { name: "lac: coverage drop", first_batch: 6, last_batch: 9 })]);
    const b = banner(1).el;
    const line = b.querySelector<HTMLButtonElement>("button.calwatch-warning-line");
    const body = b.querySelector<HTMLElement>(".calwatch-warning-body");
    expect(line?.textContent).toBe("lac: coverage drop" + "since batch 6" + "▸");
    expect(line?.getAttribute("aria-expanded")).toBe("false");
    expect(body?.hidden).toBe(true);
    expect(body?.contains(banner(1).ack)).toBe(true); // the actions are in the expanded part
    line?.querySelector("strong")?.click(); // a click anywhere on the line
    expect(banner(1).el.querySelector<HTMLElement>(".calwatch-warning-body")?.hidden).toBe(false);
    expect(line?.getAttribute("aria-expanded")).toBe("true");
    expect(banner(1).el.classList.contains("calwatch-warning-open")).toBe(true);
    line?.click();
    expect(body?.hidden).toBe(true);
  });

  it("banners only open and unacknowledged warnings, most recent first, with their content", () => {
    const { el, episodes, banner } = setup([
      warning(1, { first_batch: 3, last_batch: 9 }),
      warning(2, { open: false }),
      warning(3, { acknowledged: true }),
      warning(4, {
        name: "coverage-drop",
        explanation: "Coverage fell below 90%.",
        threatens: "marginal coverage",
        action: "collect labels",
        statistic: 23.456,
        threshold: 20,
        false_alarm_control: "at most 5% false alarms, ever",
        first_batch: 12,
        last_batch: 15,
      }),
    ]);
    expect(el.hidden).toBe(false);
    expect(episodes()).toEqual([4, 1]);
    const b = banner(4).el;
    expect(b.querySelector("strong.calwatch-warning-name")?.textContent).toBe("coverage-drop");
    expect(b.querySelector(".calwatch-warning-batches")?.textContent).toBe("since batch 12");
    expect(b.querySelector(".calwatch-warning-explanation")?.textContent).toBe("Coverage fell below 90%.");
    expect(b.querySelector(".calwatch-warning-threatens")?.textContent).toBe("threatens: marginal coverage");
    expect(b.querySelector(".calwatch-warning-action")?.textContent).toBe("suggested: collect labels");
    const details = banner(4).details;
    expect(details.open).toBe(false);
    expect(details.textContent).toContain("statistic 23.46 vs threshold 20");
    expect(details.textContent).toContain("at most 5% false alarms, ever");
    expect(details.querySelector<HTMLElement>(".calwatch-warning-rows")?.hidden).toBe(true); // no rows sent
    expect(banner(4).ack.textContent).toBe("Acknowledge");
    expect(banner(4).form.hidden).toBe(true);
    expect(banner(1).el.querySelector(".calwatch-warning-batches")?.textContent).toBe("since batch 3");
  });

  it(`shows ${MAX_BANNERS} banners and a "+N more" toggle that expands and collapses`, () => {
    const { episodes, more } = setup([warning(1), warning(2), warning(3), warning(4), warning(5, { open: false })]);
    expect(episodes()).toEqual([4, 3]);
    expect(more().hidden).toBe(false);
    expect(more().textContent).toBe("+2 more");
    expect(more().getAttribute("aria-expanded")).toBe("false");
    more().click();
    expect(episodes()).toEqual([4, 3, 2, 1]);
    expect(more().textContent).toBe("show fewer");
    expect(more().getAttribute("aria-expanded")).toBe("true");
    more().click();
    expect(episodes()).toEqual([4, 3]);
    expect(more().textContent).toBe("+2 more");
  });

  it("has no +N more toggle for two banners or fewer", () => {
    const { episodes, more } = setup([warning(1), warning(2)]);
    expect(episodes()).toEqual([2, 1]);
    expect(more().hidden).toBe(true);
  });

  it("acknowledges: the button opens a note input, OK sends exactly {kind, episode, note}", () => {
    const { model, banner, episodes } = setup([warning(6), warning(7)]);
    const b = banner(7);
    b.ack.click();
    expect(b.form.hidden).toBe(false);
    expect(b.ack.hidden).toBe(true);
    expect(document.activeElement).toBe(b.note);
    expect(model.sent).toEqual([]);
    b.note.value = "  known upstream outage ";
    b.ok.click();
    expect(model.sent).toStrictEqual([{ kind: "acknowledge", episode: 7, note: "known upstream outage" }]);
    // Waiting for the kernel: no second send, the banner says so.
    expect(b.form.hidden).toBe(true);
    expect(b.ack.hidden).toBe(false);
    expect(b.ack.disabled).toBe(true);
    expect(b.ack.textContent).toBe("Acknowledging…");
    b.ack.click();
    expect(b.form.hidden).toBe(true);
    expect(model.sent).toHaveLength(1);
    // The kernel records it: the banner goes.
    model.set("_warnings", [
      warning(6),
      warning(7, { acknowledged: true, ack_note: "known upstream outage", ack_by: "ana", ack_at: "t" }),
    ]);
    expect(episodes()).toEqual([6]);
  });

  it("sends an empty note when none is typed, and Enter confirms like OK", () => {
    const { model, banner } = setup([warning(1), warning(2)]);
    banner(1).ack.click();
    banner(1).ok.click();
    banner(2).ack.click();
    banner(2).note.value = "by keyboard";
    banner(2).note.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(model.sent).toStrictEqual([
      { kind: "acknowledge", episode: 1, note: "" },
      { kind: "acknowledge", episode: 2, note: "by keyboard" },
    ]);
  });

  it("cancel (button or Escape) sends nothing and clears the note", () => {
    const { model, banner } = setup([warning(1)]);
    const b = banner(1);
    b.ack.click();
    b.note.value = "typo";
    b.cancel.click();
    expect(b.form.hidden).toBe(true);
    expect(b.ack.hidden).toBe(false);
    expect(b.ack.disabled).toBe(false);
    expect(document.activeElement).toBe(b.ack);
    b.ack.click();
    expect(b.note.value).toBe("");
    b.note.value = "again";
    b.note.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }));
    expect(b.form.hidden).toBe(true);
    expect(model.sent).toEqual([]);
  });

  it("lets the acknowledge button be used again if the kernel reopens the episode", () => {
    const { model, banner } = setup([warning(1)]);
    banner(1).ack.click();
    banner(1).ok.click();
    expect(banner(1).ack.disabled).toBe(true);
    model.set("_warnings", [warning(1, { open: false })]); // closed: sent state dropped
    model.set("_warnings", [warning(1)]);
    expect(banner(1).ack.disabled).toBe(false);
  });

  it("toggles a log of every warning, most recent first, with acknowledgement details", () => {
    const { model, toggle, log } = setup([
      warning(1, { name: "a", open: false, first_batch: 2, last_batch: 5 }),
      warning(2, { name: "b", acknowledged: true, ack_by: "ana", ack_at: "2025-05-01 10:00", ack_note: "ok" }),
      warning(3, { name: "c", first_batch: 12 }),
    ]);
    expect(toggle().hidden).toBe(false);
    expect(toggle().textContent).toBe("3 warnings (1 open, 1 acknowledged)");
    expect(toggle().getAttribute("aria-expanded")).toBe("false");
    expect(log().hidden).toBe(true);
    expect(log().querySelectorAll("li")).toHaveLength(0);
    toggle().click();
    expect(log().hidden).toBe(false);
    expect(toggle().getAttribute("aria-expanded")).toBe("true");
    const items = [...log().querySelectorAll<HTMLLIElement>("li.calwatch-log-entry")];
    expect(items.map((li) => li.dataset.episode)).toEqual(["3", "2", "1"]);
    expect(items.map((li) => li.textContent)).toEqual([
      "c · since batch 12 · open",
      "b · since batch 12 · openacknowledged by ana at 2025-05-01 10:00 — ok",
      "a · batches 2–5 · closed",
    ]);
    expect(items[1]?.querySelector(".calwatch-log-ack")?.textContent).toBe(
      "acknowledged by ana at 2025-05-01 10:00 — ok",
    );
    // The log follows the trait while open.
    model.set("_warnings", [warning(1, { name: "a", open: false, first_batch: 2, last_batch: 5 })]);
    expect(toggle().textContent).toBe("1 warning (0 open)");
    expect(log().querySelectorAll("li")).toHaveLength(1);
    toggle().click();
    expect(log().hidden).toBe(true);
  });

  it("re-renders on trait updates in place: no duplicates, typed note and open details kept", () => {
    const { model, el, banner, banners, toggle } = setup([warning(1), warning(2)]);
    const first = banner(2);
    first.details.open = true;
    first.ack.click();
    first.note.value = "half typed";
    for (let i = 0; i < 5; i++) {
      model.set("_warnings", [warning(1), warning(2, { statistic: 30 + i })]);
    }
    expect(banners()).toHaveLength(2);
    expect(el.querySelectorAll("details")).toHaveLength(2);
    expect(el.querySelectorAll("button.calwatch-ack")).toHaveLength(2);
    const again = banner(2);
    expect(again.el).toBe(first.el);
    expect(again.details.open).toBe(true);
    expect(again.details.textContent).toContain("statistic 34 vs threshold 20");
    expect(again.form.hidden).toBe(false);
    expect(again.note.value).toBe("half typed");
    expect(document.activeElement).toBe(again.note);
    // A new warning goes on top; the log toggle is still one element.
    model.set("_warnings", [warning(1), warning(2), warning(3)]);
    expect(banners().map((b) => b.dataset.episode)).toEqual(["3", "2"]);
    expect(el.querySelectorAll("button.calwatch-warning-toggle")).toHaveLength(1);
    expect(toggle().textContent).toBe("3 warnings (3 open)");
    // All gone: hidden again.
    model.set("_warnings", []);
    expect(banners()).toHaveLength(0);
    expect(el.hidden).toBe(true);
  });

  it("reports a malformed trait through onError and clears it when fixed", () => {
    const { model, errors, episodes } = setup([warning(1), { episode: "x" }]);
    expect(episodes()).toEqual([1]);
    expect(errors[errors.length - 1]).toBe('_warnings[1] has no integer "episode"');
    model.set("_warnings", [warning(1)]);
    expect(errors[errors.length - 1]).toBe("");
  });

  it("dispose removes the model and DOM listeners", () => {
    const { model, alerts, banner, banners, more } = setup([warning(1), warning(2), warning(3)]);
    banner(3).ack.click();
    alerts.dispose();
    expect(model.listenerCount("change:_warnings")).toBe(0);
    banner(3).ok.click();
    more().click();
    model.set("_warnings", [warning(9)]);
    expect(model.sent).toEqual([]);
    expect(banners().map((b) => b.dataset.episode)).toEqual(["3", "2"]);
  });
});
