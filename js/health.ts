// The health strip at the top of the dashboard: one chip per calibrator with its promise, its
// state (holding / waiting / at risk / broken) and a sparkline of the last batches.
//
// The kernel decides everything (`calwatch.views.health.health`, the `health` dataset, validated by
// model.parseHealth); this file only draws. Every text goes through textContent or an attribute;
// the sparkline is SVG built with createElementNS from numbers.

import { type HealthRow, type KeyedRow, parseHealth, type SparkPoint } from "./model";

const SVG = "http://www.w3.org/2000/svg";
/** Sparkline size in SVG units (the CSS scales it). */
export const SPARK_WIDTH = 64;
export const SPARK_HEIGHT = 18;
const PAD = 2;

/** The label shown for a state. */
export function stateLabel(state: HealthRow["state"]): string {
  return state === "waiting" ? "no labels yet" : state;
}

/**
 * SVG path data of a sparkline series (`pick` of each point), x by batch over the points' range,
 * y over [lo, hi]; a gap (null) breaks the line. "" when there is nothing to draw.
 */
export function sparkPath(points: readonly SparkPoint[], pick: 1 | 2, lo: number, hi: number): string {
  if (points.length === 0) return "";
  const first = points[0]?.[0] ?? 0;
  const last = points[points.length - 1]?.[0] ?? first;
  const span = Math.max(1, last - first);
  const range = hi - lo > 1e-12 ? hi - lo : 1;
  let d = "";
  let drawing = false;
  for (const p of points) {
    const v = p[pick];
    if (v === null) {
      drawing = false;
      continue;
    }
    const x = points.length === 1 ? SPARK_WIDTH / 2 : PAD + ((p[0] - first) / span) * (SPARK_WIDTH - 2 * PAD);
    const y = SPARK_HEIGHT - PAD - ((v - lo) / range) * (SPARK_HEIGHT - 2 * PAD);
    d += `${drawing ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    drawing = true;
  }
  return d;
}

/** The y range of a sparkline: every value and reference, padded a little. */
export function sparkRange(points: readonly SparkPoint[]): [number, number] {
  const vs = points.flatMap((p) => [p[1], p[2]]).filter((v): v is number => v !== null);
  if (vs.length === 0) return [0, 1];
  const lo = Math.min(...vs);
  const hi = Math.max(...vs);
  const pad = Math.max(0.01, (hi - lo) * 0.1);
  return [lo - pad, hi + pad];
}

function sparkline(doc: Document, row: HealthRow): SVGSVGElement {
  const svg = doc.createElementNS(SVG, "svg");
  svg.setAttribute("class", "calwatch-chip-spark");
  svg.setAttribute("viewBox", `0 0 ${SPARK_WIDTH} ${SPARK_HEIGHT}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  const [lo, hi] = sparkRange(row.spark);
  for (const [pick, className] of [
    [2, "calwatch-spark-ref"],
    [1, "calwatch-spark-line"],
  ] as const) {
    const d = sparkPath(row.spark, pick, lo, hi);
    if (d === "") continue;
    const path = doc.createElementNS(SVG, "path");
    path.setAttribute("class", className);
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}

function span(doc: Document, className: string, text: string): HTMLSpanElement {
  const el = doc.createElement("span");
  el.className = className;
  el.textContent = text;
  return el;
}

/** One chip: `div.calwatch-chip[data-calibrator][data-state]`, the reason as its last line and title. */
export function drawChip(doc: Document, row: HealthRow): HTMLElement {
  const chip = doc.createElement("div");
  chip.className = "calwatch-chip";
  chip.setAttribute("role", "listitem");
  chip.dataset.calibrator = row.calibrator;
  chip.dataset.state = row.state;
  chip.title = `${row.calibrator}: ${row.promise}, ${stateLabel(row.state)}. ${row.reason}`;
  const dot = span(doc, "calwatch-chip-dot", "");
  dot.setAttribute("aria-hidden", "true");
  chip.append(
    dot,
    span(doc, "calwatch-chip-name", row.calibrator),
    span(doc, "calwatch-chip-state", stateLabel(row.state)),
    span(doc, "calwatch-chip-promise", row.promise),
    sparkline(doc, row),
    span(doc, "calwatch-chip-reason", row.reason),
  );
  return chip;
}

export interface HealthStrip {
  readonly el: HTMLElement;
  /** Draws the `health` rows in calibrator order; returns problems with them ("" = none). */
  draw(rows: readonly KeyedRow[], order: readonly string[]): string;
  /** Each calibrator's state as last drawn (the overview cards take their colour from it). */
  states(): Map<string, HealthRow["state"]>;
}

export function createHealth(doc: Document = document): HealthStrip {
  const el = doc.createElement("div");
  el.className = "calwatch-health";
  el.setAttribute("role", "list");
  el.setAttribute("aria-label", "Health at a glance: each calibrator's promise and state");
  el.hidden = true;
  /** What was last drawn, to leave the DOM alone when nothing changed (no flicker, tooltips stay). */
  let drawn = "";
  let states = new Map<string, HealthRow["state"]>();
  return {
    el,
    states: () => new Map(states),
    draw(raw, order) {
      const { rows, problems } = parseHealth(raw);
      const rank = new Map(order.map((name, i) => [name, i]));
      rows.sort((a, b) => (rank.get(a.calibrator) ?? 1e9) - (rank.get(b.calibrator) ?? 1e9));
      states = new Map(rows.map((r) => [r.calibrator, r.state]));
      const signature = JSON.stringify(rows);
      if (signature !== drawn) {
        drawn = signature;
        el.replaceChildren(...rows.map((row) => drawChip(doc, row)));
        const states = rows.map((r) => r.state);
        el.dataset.worst = states.includes("broken")
          ? "broken"
          : states.includes("at risk")
            ? "at risk"
            : states.includes("holding")
              ? "holding"
              : "waiting";
      }
      el.hidden = rows.length === 0;
      return problems.join("\n");
    },
  };
}
