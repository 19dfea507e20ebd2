// Overview status cards, one per calibrator, drawn from the kernel's `overview` dataset rows
// (calwatch.views.dashboard.overview_rows). Every text goes through textContent.

import type { KeyedRow } from "./model";

const int = new Intl.NumberFormat("en-US");

function num(row: KeyedRow, field: string): number | null {
  const v = row[field];
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function f3(x: number | null): string {
  return x === null ? "n/a" : x.toFixed(3);
}

function pct(x: number | null): string {
  return x === null ? "n/a" : `${(100 * x).toFixed(1)}%`;
}

/** The lines of one card, in order: [className, text]. */
export function cardLines(row: KeyedRow): [string, string][] {
  const lines: [string, string][] = [];
  const kind = row.kind;
  const nRows = num(row, "n_rows") ?? 0;
  const nLab = num(row, "n_labelled") ?? 0;
  const batches = num(row, "n_batches") ?? 0;
  if (batches === 0) {
    lines.push(["calwatch-card-empty", "Waiting for the first batch: its promise is stated above."]);
  } else if (kind === "sets") {
    const target = num(row, "target");
    const cov = num(row, "coverage");
    if (cov === null) {
      lines.push(["calwatch-card-empty", "No labels yet: coverage appears when labels arrive."]);
      if (target !== null) lines.push(["calwatch-card-target", `target coverage ${f3(target)}`]);
    } else {
      const lo = num(row, "coverage_lo");
      const hi = num(row, "coverage_hi");
      lines.push([
        "calwatch-card-coverage",
        `coverage ${f3(cov)} [${f3(lo)}, ${f3(hi)}] vs target ${f3(target)}`,
      ]);
    }
    const size = num(row, "mean_set_size");
    if (size !== null) lines.push(["calwatch-card-size", `mean set size ${size.toFixed(2)}`]);
  } else if (kind === "risk") {
    const est = num(row, "estimated_error");
    const obs = num(row, "observed_error");
    // What the estimate promises: "upper estimate (conservative)" for InvCP, "calibrated estimate".
    const promise = typeof row.estimate_promise === "string" ? row.estimate_promise : "estimate";
    // One number per scope, each named: the whole stream's estimate against the error observed on
    // its labelled rows (with their exact band); a guarded estimate's band is of one batch.
    lines.push(["calwatch-card-error", `whole stream: estimate ${f3(est)} (${promise})`]);
    if (obs === null) {
      lines.push(["calwatch-card-observed", "observed: no labels yet"]);
    } else {
      const lo = num(row, "observed_error_lo");
      const hi = num(row, "observed_error_hi");
      lines.push([
        "calwatch-card-observed",
        `observed ${f3(obs)} [${f3(lo)}, ${f3(hi)}] on ${int.format(nLab)} labelled rows`,
      ]);
    }
    const bandLo = num(row, "latest_error_band_lo");
    const bandHi = num(row, "latest_error_band_hi");
    if (bandLo !== null && bandHi !== null) {
      const last = num(row, "last_batch");
      lines.push(["calwatch-card-band", `batch ${last ?? "?"}: 95% band [${f3(bandLo)}, ${f3(bandHi)}]`]);
    }
  }
  const admitted = num(row, "admitted_share");
  if (admitted !== null) lines.push(["calwatch-card-admitted", `admitted / kept ${pct(admitted)}`]);
  if (batches > 0) {
    lines.push([
      "calwatch-card-counts",
      `whole stream: ${int.format(nLab)} labelled of ${int.format(nRows)} rows · ${int.format(batches)} batches`,
    ]);
  }
  const open = num(row, "open_warnings") ?? 0;
  const modelWide = num(row, "model_warnings") ?? 0;
  const parts = [];
  if (open > 0) parts.push(`${open} open ${open === 1 ? "warning" : "warnings"}`);
  if (modelWide > 0) parts.push(`${modelWide} on the model`);
  const acked = num(row, "acknowledged_warnings") ?? 0;
  if (acked > 0) parts.push(`${acked} acknowledged`);
  lines.push(["calwatch-card-warnings", parts.length > 0 ? parts.join(" · ") : "no open warnings"]);
  return lines;
}

/** "ok", "below" (the coverage interval lies under the target), "warn" (open warnings) or "". */
export function cardStatus(row: KeyedRow): string {
  const target = num(row, "target");
  const hi = num(row, "coverage_hi");
  if (target !== null && hi !== null && hi < target) return "below";
  if ((num(row, "open_warnings") ?? 0) > 0) return "warn";
  return num(row, "coverage") !== null || num(row, "observed_error") !== null ? "ok" : "";
}

/** A card's status from the calibrator's health state (the strip's rule, decided in the kernel). */
const STATUS_OF_STATE: Record<string, string> = { holding: "ok", "at risk": "warn", broken: "below", waiting: "" };

/**
 * Draws the cards of `rows` (in the calibrators' order) into `el`. `states` (calibrator -> health
 * state) colours each card as the health strip does; a calibrator without one (an older kernel)
 * falls back to cardStatus.
 */
export function drawCards(
  el: HTMLElement,
  rows: readonly KeyedRow[],
  order: readonly string[],
  doc: Document,
  states: ReadonlyMap<string, string> = new Map(),
): void {
  const rank = new Map(order.map((name, i) => [name, i]));
  const sorted = [...rows].sort((a, b) => (rank.get(a.key) ?? 1e9) - (rank.get(b.key) ?? 1e9));
  const cards = sorted.map((row) => {
    const card = doc.createElement("div");
    card.className = "calwatch-card";
    card.dataset.calibrator = String(row.calibrator ?? row.key);
    const state = states.get(String(row.calibrator ?? row.key));
    const status = state !== undefined ? (STATUS_OF_STATE[state] ?? "") : cardStatus(row);
    if (status !== "") card.dataset.status = status;
    const title = doc.createElement("div");
    title.className = "calwatch-card-title";
    title.textContent = String(row.label ?? row.key);
    card.append(title);
    for (const [className, text] of cardLines(row)) {
      const line = doc.createElement("div");
      line.className = className;
      line.textContent = text;
      card.append(line);
    }
    return card;
  });
  el.replaceChildren(...cards);
}
