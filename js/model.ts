// Kernel-synced model state: the traits of `calwatch.widget.MonitorWidget`, typed 1:1 after
// docs/widget-protocol.md, and the custom messages exchanged with the kernel. Nothing in this
// file lives only in the browser (that is in controls.ts / widget.ts).

/** A Vega-Lite spec as built by `calwatch.views.charts` (data by name, no inline values). */
export type VegaLiteSpec = Record<string, unknown>;

/** `_status`: counters for the status line (all integers). */
export interface Status {
  rows_seen: number;
  rows_labelled: number;
  rows_pending: number;
  batches: number;
  labels_unmatched: number;
  rows_in_window: number;
  /** (calibrator, class) pairs too rare for a per-class test (optional: older kernels omit it). */
  classes_untested?: number;
  /** Label-based detectors whose labelled rows look correlated (row alarms held back; optional). */
  detectors_on_correlated_rows?: number;
  /** Where table batches came from, e.g. "spark: 1,204,331,000 rows, 365 buckets" ("" for none). */
  sources?: string;
}

/**
 * One entry of `_warnings`: a shift-warning episode of one monitor (SHIFT.md §5). The kernel
 * sends the whole list, oldest first, whenever any entry changes.
 */
export interface ShiftWarning {
  /** Episode id, unique within the widget (what an acknowledge message names). */
  episode: number;
  /** Monitor name. */
  name: string;
  /** The guarantee the shift threatens, in words. */
  threatens: string;
  /** One line in plain words. */
  explanation: string;
  /** Suggested action (recalibrate on recent labelled data, collect labels, retrain). */
  action: string;
  statistic: number;
  threshold: number;
  /** The false-alarm control the monitor offers, in words. */
  false_alarm_control: string;
  first_batch: number;
  last_batch: number;
  /** Stream rows involved (optional: sent by kernels that track them). */
  first_row?: number;
  last_row?: number;
  /** The episode is still going on (the monitor has not come back below its threshold). */
  open: boolean;
  acknowledged: boolean;
  /** The ack_* fields are "" until acknowledged (the kernel may send null: parseWarnings maps it). */
  ack_note: string;
  ack_by: string;
  ack_at: string;
}

/** The synced traits, for `AnyModel<WidgetModel>`. */
export interface WidgetModel {
  /** Header text. */
  _title: string;
  /** One Vega-Lite spec per chart name. */
  _specs: Record<string, VegaLiteSpec>;
  /** Order in which the charts are laid out. */
  _chart_order: string[];
  /** Calibrator names for the picker. */
  _calibrators: string[];
  /** Picked calibrator, "" = all. Written by the browser (picker) and by the kernel. */
  _selected: string;
  /** Written by the browser (pause toggle) and by the kernel. */
  _paused: boolean;
  /** Status line counters. */
  _status: Status;
  /** What the monitor does by rule (`Monitor.notices()`), one line each; the status line's tooltip. */
  _notices?: string[];
  /** Error drawn in the widget ("" = none). */
  _error: string;
  /** Shift warnings, oldest first. Optional: a kernel without warnings does not send it. */
  _warnings?: ShiftWarning[];
  /** A frozen view with no kernel behind it (a standalone report): kernel-bound controls are hidden. */
  _readonly?: boolean;
  // ---- the dashboard (all optional: a kernel without them gets a single section of charts)
  /** Tabs in order, each with the chart kinds and panels it shows (names of `_specs`). */
  _sections?: Section[];
  /** Per chart: the dataset row it needs (`field` not null) and the text shown until one exists. */
  _empty_states?: Record<string, EmptyState>;
  /** Class names, for the class filter. */
  _classes?: string[];
  /** Picked class, "" = all. Written by the browser (class filter) and by the kernel. */
  _class_filter?: string;
  /** What-if level α, null = off. Written by the browser (α slider) and by the kernel. */
  _alpha?: number | null;
  /** Selective calibrators, for the kept-share slider (optional: none without them). */
  _selectives?: string[];
  /** Target share ξ of rows kept (null = as fitted). Written by the kept-share slider. */
  _kept_share?: number | null;
  /** What the α control applies to. */
  _alpha_info?: AlphaInfo;
  /** Rows of the window used by the window panels, most recent first (0 = all). Browser-written. */
  _window_rows?: number;
  /** The timeline brush: [first, last] batch (inclusive) or []. Written by the browser. */
  _batch_range?: number[];
  /** Author used for notes typed without one. */
  _default_author?: string;
}

/** One tab: its name and the chart kinds / panels it shows, in order. */
export interface Section {
  name: string;
  charts: string[];
}

/** Empty state of a chart: shown while no row of `dataset` has a non-null `field`. */
export interface EmptyState {
  dataset: string;
  field: string;
  message: string;
}

/** `_alpha_info`: the window the α control recomputes. */
export interface AlphaInfo {
  alpha: number | null;
  calibrators: string[];
  first_batch: number | null;
  last_batch: number | null;
  n_batches: number;
  n_rows: number;
  window: number;
  targets: Record<string, number>;
}

/** Every row of every dataset carries a `key`, unique within its dataset. */
export interface KeyedRow {
  key: string;
  [field: string]: unknown;
}

/** `batches`: one row per batch and calibrator. Coverage fields are null until labelled. */
export interface BatchRow extends KeyedRow {
  batch: number;
  name: string;
  calibrator: string;
  target: number;
  n_rows: number;
  n_labelled: number;
  n_pending: number;
  n_covered: number;
  coverage: number | null;
  coverage_lo: number | null;
  coverage_hi: number | null;
  mean_set_size: number;
  singleton_share: number;
  full_share: number;
}

/** `set_sizes`: histogram of prediction-set sizes per batch and calibrator. */
export interface SetSizeRow extends KeyedRow {
  batch: number;
  calibrator: string;
  size: number;
  count: number;
}

/** `class_coverage`: per-class coverage counts per batch and calibrator. */
export interface ClassCoverageRow extends KeyedRow {
  batch: number;
  calibrator: string;
  class: string | number;
  n_labelled: number;
  n_covered: number;
}

/**
 * `slice_coverage`: a picked slice's mean set size and coverage per window batch and set
 * calibrator (key `<slice>|<batch>|<calibrator>`), only batches with a row of the slice. The
 * kernel sends the series of the slices views picked (`SliceFilterMessage`); each view draws its
 * own (the Vega signal `slice_filter`) on the coverage and mean-set-size charts.
 */
export interface SliceCoverageRow extends KeyedRow {
  batch: number;
  /** The batch's name (its index when observed without one). */
  name: string;
  calibrator: string;
  /** The calibrator's legend label (as in `batches`). */
  label: string;
  /** The slice in the words of `mon.slices()`: "carrier = B", "carrier = B & origin = JFK". */
  slice: string;
  target: number | null;
  /** The slice's rows in the batch, labelled or not, and the mean size of their sets. */
  n_rows: number;
  mean_set_size: number | null;
  n_labelled: number;
  n_covered: number;
  /** Null without a labelled row of the slice in the batch. */
  coverage: number | null;
  /** Exact (Clopper–Pearson) 95% interval. */
  coverage_lo: number | null;
  coverage_hi: number | null;
}

/** A calibrator's state in the health strip (the rule: `calwatch.views.health.health`). */
export type HealthState = "holding" | "waiting" | "at risk" | "broken";

export const HEALTH_STATES: readonly HealthState[] = ["holding", "waiting", "at risk", "broken"];

/** One sparkline point: [batch, value (coverage, or observed error; null without labels), reference]. */
export type SparkPoint = [number, number | null, number | null];

/**
 * `health`: one row per calibrator (key = its name), computed in the kernel from the last batches
 * and the open warnings; the front end only draws it.
 */
export interface HealthRow extends KeyedRow {
  calibrator: string;
  kind: string;
  /** The promise in words: "90% coverage", "risk ≤ 0.120 (top-1)". */
  promise: string;
  state: HealthState;
  /** Why, in one line. */
  reason: string;
  /** Pooled recent coverage (or error rate) and its 95% band; null without labels. */
  value: number | null;
  lo: number | null;
  hi: number | null;
  /** What `value` is judged against: the coverage floor, or the estimated error. */
  reference: number | null;
  /** The promised coverage (null for kinds without one). */
  target: number | null;
  n_labelled: number;
  n_batches: number;
  first_batch: number | null;
  last_batch: number | null;
  /** Open warnings naming the calibrator (episodes). */
  episodes: number[];
  spark: SparkPoint[];
}

/** The datasets the kernel knows today, by name. */
export interface DatasetRows {
  batches: BatchRow;
  set_sizes: SetSizeRow;
  class_coverage: ClassCoverageRow;
  health: HealthRow;
  slice_coverage: SliceCoverageRow;
}

export type DatasetName = keyof DatasetRows;

/**
 * The `data` field of upsert / replay messages: rows per dataset name. Code that moves data
 * around treats it generically (any name, keyed rows), so a new dataset on the Python side
 * flows through without a change here; `TypedDataBatch` types the known datasets' fields.
 */
export type DataBatch = { [dataset: string]: KeyedRow[] | undefined };

/** A DataBatch viewed with the known datasets typed (for code reading their fields). */
export type TypedDataBatch = { [K in DatasetName]?: DatasetRows[K][] };

/**
 * kernel -> browser: the rows that changed after a batch / label call (only the datasets and rows
 * that changed: the kernel keeps what every view holds); `seq` grows by 1 per message.
 */
export interface UpsertMessage {
  kind: "upsert";
  seq: number;
  data: DataBatch;
  /**
   * When the kernel began computing this update (ms since the Unix epoch): views measure from it
   * how long the update took to reach the screen (`globalThis.__calwatchLatencies`). Optional.
   */
  t0?: number;
}

/** kernel -> browser: the whole current state for view `view`, containing every seq <= `seq`. */
export interface ReplayMessage {
  kind: "replay";
  view: string;
  seq: number;
  data: DataBatch;
}

/** browser -> kernel: sent by each view once it has rendered. */
export interface ReplayRequest {
  kind: "replay-request";
  view: string;
}

/** browser -> kernel: acknowledge a warning episode (the kernel records who and when). */
export interface AcknowledgeMessage {
  kind: "acknowledge";
  episode: number;
  /** Optional note, "" = none. */
  note: string;
}

/** browser -> kernel: pin a note to a batch, a warning episode or the stream (both null). */
export interface NoteMessage {
  kind: "note";
  text: string;
  /** "" = the kernel's default author. */
  author: string;
  batch: number | null;
  episode: number | null;
}

/** browser -> kernel: one page of a window batch's rows, answered by a RowsMessage for `view`. */
export interface RowsRequest {
  kind: "rows-request";
  view: string;
  /** The batch; null: the newest window batch holding rows of `slice_filter` (the reply names it). */
  batch: number | null;
  page: number;
  page_size: number;
  /**
   * The view's class filter ("" = none) when it asked: the rows to pick (predicted as or labelled
   * that class). The kernel's `_class_filter` may not have caught up yet (a busy kernel gets
   * trait saves late, custom messages at once), so the request names it.
   */
  class_filter: string;
  /**
   * The view's slice filter ("" = none): the words of a slice of `mon.slices()` ("carrier = B6",
   * or a pair "carrier = B6 & hour ≥ 18"); the kernel keeps the rows in it (by their slice codes).
   */
  slice_filter: string;
}

/**
 * browser -> kernel: the view's slice filter changed (a click on a slice, "✕ slice", a second
 * click, closing the row table): the kernel sends that slice's coverage per window batch in
 * `slice_coverage` ("" = none: its rows go) and keeps it current while it is picked.
 */
export interface SliceFilterMessage {
  kind: "slice-filter";
  view: string;
  /** Words of a slice of `mon.slices()`, "" = none. */
  slice_filter: string;
}

/** kernel -> browser: a page of rows (or an error, e.g. the batch left the window). */
export interface RowsMessage {
  kind: "rows";
  view: string;
  batch: number;
  /** The name the batch was observed under (`observe(name=...)`; its index when none was given). */
  batch_name?: string;
  page: number;
  page_size: number;
  n_rows: number;
  n_pages: number;
  columns: string[];
  rows: unknown[][];
  set_calibrator: string;
  risk_calibrator: string;
  /** The class filter the rows were picked by (rows predicted as or labelled that class), "" = none. */
  class_filter?: string;
  /** The slice the rows were picked by (words of `mon.slices()`), "" = none. */
  slice_filter?: string;
  error?: string;
}

/** Validates a `rows` message (null for other kinds); fields of the wrong type get defaults. */
export function parseRowsMessage(msg: unknown): RowsMessage | null {
  if (!isRecord(msg) || msg.kind !== "rows" || typeof msg.view !== "string") return null;
  const int = (v: unknown, d: number) => (typeof v === "number" && Number.isInteger(v) ? v : d);
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  const rows = Array.isArray(msg.rows) ? msg.rows.filter((r): r is unknown[] => Array.isArray(r)) : [];
  const columns = Array.isArray(msg.columns) ? msg.columns.map((c) => String(c)) : [];
  return {
    kind: "rows",
    view: msg.view,
    batch: int(msg.batch, -1),
    page: int(msg.page, 0),
    page_size: int(msg.page_size, 20),
    n_rows: int(msg.n_rows, 0),
    n_pages: int(msg.n_pages, 1),
    columns,
    rows,
    set_calibrator: str(msg.set_calibrator),
    risk_calibrator: str(msg.risk_calibrator),
    ...(typeof msg.batch_name === "string" ? { batch_name: msg.batch_name } : {}),
    ...(typeof msg.class_filter === "string" ? { class_filter: msg.class_filter } : {}),
    ...(typeof msg.slice_filter === "string" ? { slice_filter: msg.slice_filter } : {}),
    ...(typeof msg.error === "string" ? { error: msg.error } : {}),
  };
}

export type KernelMessage = UpsertMessage | ReplayMessage;

/** Protocol violation in a kernel message (drawn into the widget, never swallowed). */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function parseData(raw: unknown, where: string): DataBatch {
  if (!isRecord(raw)) throw new ProtocolError(`${where}: "data" must be an object of row arrays`);
  const out: Record<string, KeyedRow[]> = {};
  for (const [name, rows] of Object.entries(raw)) {
    if (!Array.isArray(rows)) {
      throw new ProtocolError(`${where}: dataset "${name}" must be an array of rows`);
    }
    for (const row of rows) {
      if (!isRecord(row) || typeof row.key !== "string") {
        throw new ProtocolError(`${where}: every row of "${name}" needs a string "key"`);
      }
    }
    out[name] = rows as KeyedRow[];
  }
  return out;
}

/**
 * Validates a `msg:custom` payload. Returns null for kinds this front end does not handle
 * (forward compatibility); throws ProtocolError for a malformed upsert / replay.
 */
export function parseKernelMessage(msg: unknown): KernelMessage | null {
  if (!isRecord(msg)) return null;
  const { kind } = msg;
  if (kind !== "upsert" && kind !== "replay") return null;
  const seq = msg.seq;
  if (typeof seq !== "number" || !Number.isInteger(seq)) {
    throw new ProtocolError(`${kind} message without an integer "seq"`);
  }
  const data = parseData(msg.data, `${kind} ${seq}`);
  if (kind === "upsert") {
    const t0 = msg.t0;
    return typeof t0 === "number" && Number.isFinite(t0) ? { kind, seq, data, t0 } : { kind, seq, data };
  }
  if (typeof msg.view !== "string") {
    throw new ProtocolError(`replay ${seq} without a string "view"`);
  }
  return { kind, view: msg.view, seq, data };
}

function finiteOrNull(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/**
 * Validates `health` rows (in the kernel's order). A row without a string calibrator or a known
 * state is dropped; other fields of the wrong type get neutral defaults (null, "", []); sparkline
 * points that are not [integer, number|null, number|null] are dropped. Every deviation is listed
 * in `problems`, for the widget's error box.
 */
export function parseHealth(raw: readonly KeyedRow[]): { rows: HealthRow[]; problems: string[] } {
  const rows: HealthRow[] = [];
  const problems: string[] = [];
  for (const row of raw) {
    const state = row.state;
    if (typeof row.calibrator !== "string" || !HEALTH_STATES.includes(state as HealthState)) {
      problems.push(`health row "${row.key}": no calibrator or an unknown state`);
      continue;
    }
    const str = (k: string) => (typeof row[k] === "string" ? (row[k] as string) : "");
    const int = (k: string) => {
      const v = row[k];
      return typeof v === "number" && Number.isInteger(v) ? v : null;
    };
    const spark: SparkPoint[] = [];
    let badPoints = 0;
    for (const p of Array.isArray(row.spark) ? row.spark : []) {
      if (Array.isArray(p) && p.length === 3 && typeof p[0] === "number" && Number.isInteger(p[0])) {
        spark.push([p[0], finiteOrNull(p[1]), finiteOrNull(p[2])]);
      } else badPoints++;
    }
    if (badPoints > 0) problems.push(`health row "${row.key}": ${badPoints} bad sparkline point(s)`);
    rows.push({
      key: row.key,
      calibrator: row.calibrator,
      kind: str("kind"),
      promise: str("promise"),
      state: state as HealthState,
      reason: str("reason"),
      value: finiteOrNull(row.value),
      lo: finiteOrNull(row.lo),
      hi: finiteOrNull(row.hi),
      reference: finiteOrNull(row.reference),
      target: finiteOrNull(row.target),
      n_labelled: int("n_labelled") ?? 0,
      n_batches: int("n_batches") ?? 0,
      first_batch: int("first_batch"),
      last_batch: int("last_batch"),
      episodes: Array.isArray(row.episodes) ? row.episodes.filter((e): e is number => Number.isInteger(e)) : [],
      spark,
    });
  }
  return { rows, problems };
}

const WARNING_STRINGS = ["name", "threatens", "explanation", "action", "false_alarm_control"] as const;
/** Strings the kernel may send as null until the warning is acknowledged. */
const WARNING_ACK_STRINGS = ["ack_note", "ack_by", "ack_at"] as const;
const WARNING_BOOLEANS = ["open", "acknowledged"] as const;
const WARNING_INTEGERS = ["first_batch", "last_batch"] as const;

/**
 * Validates `_warnings`. A missing trait (a kernel without warnings) is an empty list. An entry
 * without an integer `episode`, or repeating an earlier one, is dropped; a field of the wrong type
 * gets a neutral default (statistic / threshold: NaN, drawn as "n/a"). null is accepted without a
 * problem for statistic / threshold (not finite), the ack_* strings (not acknowledged: "") and the
 * optional first_row / last_row (left out). Every deviation is listed in `problems`, for the
 * widget's error box.
 */
export function parseWarnings(raw: unknown): { warnings: ShiftWarning[]; problems: string[] } {
  const warnings: ShiftWarning[] = [];
  const problems: string[] = [];
  if (raw === undefined || raw === null) return { warnings, problems };
  if (!Array.isArray(raw)) return { warnings, problems: ["_warnings must be an array"] };
  const seen = new Set<number>();
  raw.forEach((entry: unknown, i) => {
    if (!isRecord(entry) || typeof entry.episode !== "number" || !Number.isInteger(entry.episode)) {
      problems.push(`_warnings[${i}] has no integer "episode"`);
      return;
    }
    const episode = entry.episode;
    if (seen.has(episode)) {
      problems.push(`_warnings[${i}] repeats episode ${episode}`);
      return;
    }
    seen.add(episode);
    const bad: string[] = [];
    const str = (k: (typeof WARNING_STRINGS)[number]) => {
      const v = entry[k];
      if (typeof v === "string") return v;
      bad.push(k);
      return "";
    };
    const bool = (k: (typeof WARNING_BOOLEANS)[number]) => {
      const v = entry[k];
      if (typeof v === "boolean") return v;
      bad.push(k);
      return false;
    };
    const int = (k: (typeof WARNING_INTEGERS)[number]) => {
      const v = entry[k];
      if (typeof v === "number" && Number.isInteger(v)) return v;
      bad.push(k);
      return Number.NaN;
    };
    const num = (k: "statistic" | "threshold") => {
      const v = entry[k];
      if (typeof v === "number") return v;
      if (v !== null) bad.push(k);
      return Number.NaN;
    };
    const ackStr = (k: (typeof WARNING_ACK_STRINGS)[number]) => {
      const v = entry[k];
      if (typeof v === "string") return v;
      if (v !== null && v !== undefined) bad.push(k);
      return "";
    };
    const optInt = (k: "first_row" | "last_row") => {
      const v = entry[k];
      if (v === undefined || v === null) return {};
      if (typeof v === "number" && Number.isInteger(v)) return { [k]: v };
      bad.push(k);
      return {};
    };
    const strings = Object.fromEntries(WARNING_STRINGS.map((k) => [k, str(k)])) as Record<
      (typeof WARNING_STRINGS)[number],
      string
    >;
    const acks = Object.fromEntries(WARNING_ACK_STRINGS.map((k) => [k, ackStr(k)])) as Record<
      (typeof WARNING_ACK_STRINGS)[number],
      string
    >;
    warnings.push({
      episode,
      ...strings,
      statistic: num("statistic"),
      threshold: num("threshold"),
      first_batch: int("first_batch"),
      last_batch: int("last_batch"),
      ...optInt("first_row"),
      ...optInt("last_row"),
      open: bool("open"),
      acknowledged: bool("acknowledged"),
      ...acks,
    });
    if (bad.length > 0) problems.push(`warning episode ${episode}: bad or missing ${bad.join(", ")}`);
  });
  return { warnings, problems };
}
