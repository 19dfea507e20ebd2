"""Standalone HTML reports of a monitor or a snapshot.

Every panel, the warning log, notes, configuration and provenance, in one file that opens in a
browser with no kernel and no network.

The dashboard in the report is the widget itself, frozen: its JavaScript bundle is inlined
(base64, loaded through a ``blob:`` URL) and rendered from the saved traits and datasets by
``renderStatic`` (``js/static.ts``); the calibrator picker and tooltips work, pausing and
acknowledging (which need a kernel) are hidden. Every text that came from users, labels or class
names is escaped — in the HTML tables by :func:`html.escape`, in the embedded JSON by escaping
``<``, ``>`` and ``&``, and in the dashboard by the widget, which only ever sets ``textContent``.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from calwatch.core.guard import one_moment
from calwatch.publish.escape import escape_html, script_json
from calwatch.publish.headline import headline_html, warning_cards

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor


def write_report(source: Monitor | str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Write a standalone HTML report of a monitor (or of a snapshot folder) to ``path``.

    Parameters
    ----------
    source : Monitor or path-like
        A live monitor, or a snapshot folder written by :meth:`Monitor.save`.
    path : path-like
        The HTML file to write (replaced atomically if it exists).

    Returns
    -------
    Path
        The report file.
    """
    from calwatch.monitor.monitor import Monitor
    from calwatch.snapshot.store import read_manifest

    snapshot: dict[str, Any] | None = None
    if isinstance(source, Monitor):
        monitor = source
    else:
        snapshot = read_manifest(source) | {"path": str(Path(source).resolve())}
        monitor = Monitor.load(source)
    page = render_report(monitor, snapshot=snapshot)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp")
    staging.write_text(page, encoding="utf-8")
    staging.replace(target)
    return target


@one_moment
def render_report(monitor: Monitor, *, snapshot: dict[str, Any] | None = None) -> str:
    """The report page as a string (see :func:`write_report`)."""
    return report_page(report_parts(monitor, snapshot=snapshot))


@dataclass(frozen=True)
class ReportParts:
    """What a report page shows of one monitor: the page builder's input.

    Attributes
    ----------
    title : str
        The page title (plain text).
    generated : str
        The "generated ... by calwatch ..." line (plain text).
    sections : str
        The HTML of the warning cards, notes, coverage, configuration and provenance sections;
        every value in it is escaped.
    payload : dict
        The dashboard's saved state: ``{"model": traits, "datasets": rows per dataset}``.
    headline : str
        The first screen above the dashboard (:func:`calwatch.publish.headline.headline_html`):
        which promises hold and what broke, since when; escaped HTML.
    """

    title: str
    generated: str
    sections: str
    payload: dict[str, Any]
    headline: str = ""

    def as_json(self, **extra: Any) -> str:
        """The parts (and ``extra`` fields) as JSON, safe inside a ``<script>`` element too."""
        fields = {"title": self.title, "generated": self.generated, "sections": self.sections}
        fields["headline"] = self.headline
        return script_json(fields | self.payload | extra)


@one_moment
def report_parts(
    monitor: Monitor,
    *,
    snapshot: dict[str, Any] | None = None,
    datasets: dict[str, list[dict[str, Any]]] | None = None,
    sections: bool = True,
) -> ReportParts:
    """The title, sections and dashboard state of a monitor's report (see :func:`report_page`).

    Parameters
    ----------
    monitor : Monitor
        The monitor (live or loaded from a snapshot).
    snapshot : dict, optional
        The snapshot's manifest plus its ``path``, shown under Provenance.
    datasets : dict, optional
        The dashboard's datasets when already at hand (a live widget's
        :meth:`~calwatch.widget.MonitorWidget.current_datasets`); default: built from the monitor.
    sections : bool, default True
        Whether to build the HTML sections (warnings, notes, coverage, configuration,
        provenance); False leaves them empty, for a caller that shows only the dashboard (the
        notebook's static copy, which reads under the monitor's lock and should hold it briefly).
    """
    from calwatch import __version__
    from calwatch.widget import view_datasets, view_state

    state = view_state(monitor) | {"_selected": "", "_paused": False, "_error": ""}
    if datasets is None:
        datasets = view_datasets(monitor, dashboard_data=True)
    payload = {"model": state, "datasets": datasets}
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    parts = (
        [
            _section("Warnings", warning_cards(monitor)),
            _section("Notes", _table(monitor.notes(), empty="No notes.")),
            _section("Coverage by calibrator", coverage_table(monitor)),
            '<details class="setup"><summary>Configuration and provenance</summary>',
            _section("Configuration", _configuration(monitor)),
            _section("Provenance", _provenance(monitor, snapshot, generated, __version__)),
            "</details>",
        ]
        if sections
        else []
    )
    return ReportParts(
        title=f"calwatch report: {monitor.name}",
        generated=f"generated {generated} by calwatch {__version__}",
        sections="\n".join(parts),
        payload=payload,
        headline=headline_html(monitor) if sections else "",
    )


def report_page(parts: ReportParts, *, live_version: str | None = None) -> str:
    """A self-contained report page: the frozen dashboard (the widget's bundle inlined) and sections.

    Parameters
    ----------
    parts : ReportParts
        What the page shows (:func:`report_parts`).
    live_version : str, optional
        Build the live page of :mod:`calwatch.publish.server` instead, showing this version of the
        snapshot: the page follows the server (``api/version``, ``api/report``, same origin, the
        token of its URL) and redraws newer snapshots in place, with no reload.
    """
    from calwatch.widget import bundle_path

    bundle = base64.b64encode(bundle_path().read_bytes()).decode("ascii")
    live = live_version is not None
    return _PAGE.format(
        csp=LIVE_CSP if live else _CSP,
        title=escape_html(parts.title),
        heading=escape_html(parts.title),
        generated=escape_html(parts.generated),
        live_line='<p id="calwatch-live" class="generated" aria-live="polite"></p>' if live else "",
        headline=parts.headline,
        sections=parts.sections,
        payload=script_json(parts.payload | ({"version": live_version} if live else {})),
        bundle=script_json(bundle),
        script=_LIVE_SCRIPT if live else _STATIC_SCRIPT,
    )


def _section(title: str, body: str) -> str:
    return f"<section><h2>{escape_html(title)}</h2>\n{body}\n</section>"


def _table(frame: pl.DataFrame, *, empty: str, columns: Sequence[str] | None = None) -> str:
    if frame.is_empty():
        return f'<p class="empty">{escape_html(empty)}</p>'
    names = list(columns or frame.columns)
    head = "".join(f"<th>{escape_html(name)}</th>" for name in names)
    body = "".join(
        "<tr>" + "".join(f"<td>{_format(row[name])}</td>" for name in names) + "</tr>"
        for row in frame.select(names).iter_rows(named=True)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return escape_html(f"{value:.4g}")
    return escape_html(value)


@one_moment
def coverage_table(monitor: Monitor, cards: Sequence[Mapping[str, Any]] | None = None) -> str:
    """Coverage (and risk) by calibrator over the whole stream, as an escaped HTML table.

    The report's "Coverage by calibrator" section; also the key numbers of a notebook's static
    dashboard (:mod:`calwatch.publish.notebook_output`), which must read without any script.

    Parameters
    ----------
    monitor : Monitor
        The monitor; its whole-stream :meth:`~calwatch.Monitor.summary` is summed per calibrator.
    cards : sequence of mapping, optional
        The same sums already at hand: a live widget's whole-stream cards (the ``overview``
        rows of :meth:`~calwatch.widget.MonitorWidget.current_datasets`, current with the monitor).
        The per-calibrator sums of the per-batch rows are the same numbers (the counts exactly,
        the row-weighted means up to the order of a float sum), and reading them costs
        O(calibrators) where the summary costs a frame of every batch. That frame is kept between
        calls (:mod:`calwatch.core.frame_cache`), so a static copy refreshed from it every 30 s held a
        second copy of the stream's history in the kernel's anonymous memory, growing ~400 bytes
        a batch for as long as the stream ran. Regression monitors always read the summary.
    """
    regression = getattr(monitor, "task", None) == "regression"
    if cards is not None and not regression:
        if not any(c.get("n_batches") for c in cards):
            return '<p class="empty">No batches observed.</p>'
        sets_table, risk_table = _coverage_from_cards(cards)
    else:
        summary = monitor.summary() if monitor.n_batches else pl.DataFrame()
        if summary.is_empty():
            return '<p class="empty">No batches observed.</p>'
        if regression:
            return _regression_table(summary)
        sets_table, risk_table = _coverage_from_summary(summary)
    parts = [_table(sets_table, empty="No set calibrators.")]
    if not risk_table.is_empty():
        parts.append(_table(risk_table, empty=""))
    return "\n".join(parts)


#: The coverage table's columns: set calibrators, then risk calibrators.
_SETS_SCHEMA = {"calibrator": pl.String, "target": pl.Float64, "rows": pl.Int64, "labelled": pl.Int64,
                "coverage": pl.Float64, "mean set size": pl.Float64}  # fmt: skip
_RISK_SCHEMA = {"calibrator": pl.String, "estimate": pl.String, "rows": pl.Int64, "labelled": pl.Int64,
                "estimated error": pl.Float64, "observed error": pl.Float64}  # fmt: skip


def _coverage_from_summary(summary: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The sets and risk tables: per-batch summary rows summed per calibrator."""
    sets = summary.filter(pl.col("kind") == "sets")
    table = sets.group_by("calibrator", maintain_order=True).agg(
        pl.col("target").first(),
        pl.col("n_rows").sum().alias("rows"),
        pl.col("n_labelled").sum().alias("labelled"),
        (pl.col("n_covered").sum() / pl.col("n_labelled").sum()).alias("coverage"),
        (pl.col("mean_set_size") * pl.col("n_rows")).sum().alias("_size"),
    )
    table = table.with_columns((pl.col("_size") / pl.col("rows")).alias("mean set size")).drop("_size")
    risk = summary.filter(pl.col("kind") == "risk")
    promise = pl.col("estimate_promise") if "estimate_promise" in risk.columns else pl.lit(None, pl.String)
    risk_table = risk.group_by("calibrator", maintain_order=True).agg(
        promise.first().alias("estimate"),  # "upper estimate (conservative)" for InvCP
        pl.col("n_rows").sum().alias("rows"),
        pl.col("n_labelled").sum().alias("labelled"),
        (pl.col("estimated_error") * pl.col("n_rows")).sum().alias("_est"),
        (pl.col("observed_error") * pl.col("n_labelled")).sum().alias("_obs"),
    )
    risk_table = risk_table.with_columns(
        (pl.col("_est") / pl.col("rows")).alias("estimated error"),
        (pl.col("_obs") / pl.col("labelled")).alias("observed error"),
    ).drop("_est", "_obs")
    return table, risk_table


def _ratio(value: Any) -> float:
    """A card's mean or rate as the summary's sums give it: NaN where nothing was counted (0 / 0)."""
    return math.nan if value is None else float(value)


def _coverage_from_cards(cards: Sequence[Mapping[str, Any]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The sets and risk tables from whole-stream cards (those of calibrators with a batch)."""
    counted = [c for c in cards if c.get("n_batches")]
    sets = [
        {"calibrator": c["calibrator"], "target": c["target"], "rows": c["n_rows"],
         "labelled": c["n_labelled"],
         "coverage": _ratio(c["n_covered"] / c["n_labelled"] if c["n_labelled"] else None),
         "mean set size": _ratio(c["mean_set_size"])}
        for c in counted if c.get("kind") == "sets"
    ]  # fmt: skip
    risk = [
        {"calibrator": c["calibrator"], "estimate": c["estimate_promise"], "rows": c["n_rows"],
         "labelled": c["n_labelled"], "estimated error": _ratio(c["estimated_error"]),
         "observed error": _ratio(c["observed_error"])}
        for c in counted if c.get("kind") == "risk"
    ]  # fmt: skip
    return pl.DataFrame(sets, schema=_SETS_SCHEMA), pl.DataFrame(risk, schema=_RISK_SCHEMA)


def _regression_table(summary: pl.DataFrame) -> str:
    """Per calibrator: the headline interval's coverage and mean width, and the mean CRPS."""
    table = summary.group_by("calibrator", maintain_order=True).agg(
        pl.col("target").first(),
        pl.col("n_rows").sum().alias("rows"),
        pl.col("n_labelled").sum().alias("labelled"),
        (pl.col("n_covered").sum() / pl.col("n_labelled").sum()).alias("coverage"),
        (pl.col("mean_width") * pl.col("n_rows")).sum().alias("_width"),
        (pl.col("crps") * pl.col("n_labelled")).sum().alias("_crps"),
    )
    table = table.with_columns(
        (pl.col("_width") / pl.col("rows")).alias("mean width"),
        (pl.col("_crps") / pl.col("labelled")).alias("CRPS"),
    ).drop("_width", "_crps")
    return _table(table, empty="No calibrators.")


def _configuration(monitor: Monitor) -> str:
    calibrators = pl.DataFrame(
        {
            "calibrator": list(monitor.calibrators),
            "configuration": [repr(cal) for cal in monitor.calibrators.values()],
            "target coverage": [monitor.targets().get(key) for key in monitor.calibrators],
        },
        schema={"calibrator": pl.String, "configuration": pl.String, "target coverage": pl.Float64},
    )
    watch = monitor.shift_watch
    detectors = pl.DataFrame(
        {
            "detector": [d.name for d in watch.detectors] if watch else [],
            "needs labels": [d.needs_labels for d in watch.detectors] if watch else [],
        },
        schema={"detector": pl.String, "needs labels": pl.Boolean},
    )
    facts = [("window (raw rows kept)", f"{monitor.window:,}"), ("classes", _class_list(monitor))]
    return "\n".join(
        [
            _definitions(facts),
            _table(calibrators, empty="No calibrators."),
            _table(detectors, empty="No shift detectors."),
        ]
    )


def _class_list(monitor: Monitor) -> str:
    try:
        return ", ".join(str(c) for c in monitor.classes_.tolist())
    except Exception:  # not calibrated yet
        return "(not calibrated)"


def _provenance(monitor: Monitor, snapshot: dict[str, Any] | None, generated: str, version: str) -> str:
    calibration = monitor.calibration_ or {}
    status = monitor.status()
    summary = monitor.summary() if monitor.n_batches else None
    facts: list[tuple[str, Any]] = [
        ("monitor", monitor.name),
        ("model", monitor.model_description),
        ("calibration rows", calibration.get("n_rows")),
        ("calibration class counts", calibration.get("class_counts")),
        ("calibrated at", calibration.get("calibrated_at")),
        ("rows seen", f"{status['rows_seen']:,}"),
        ("rows labelled", f"{status['rows_labelled']:,}"),
        ("batches", status["batches"]),
        ("labels for unknown or expired ids", status["labels_unmatched"]),
        ("labels outside the classes (skipped)", status.get("labels_outside_classes", 0)),
    ]
    if summary is not None:
        facts.append(("first batch observed", summary["observed_at"].min()))
        facts.append(("last batch observed", summary["observed_at"].max()))
    facts += [(f"data: {key}", value) for key, value in monitor.provenance.items()]
    if snapshot is not None:
        facts += [("snapshot", snapshot.get("path")), ("snapshot saved at", snapshot.get("saved_at"))]
        facts.append(("saved by calwatch", snapshot.get("calwatch_version")))
    facts += [("report generated", generated), ("calwatch", version)]
    return _definitions(facts)


def _definitions(facts: Iterable[tuple[str, Any]]) -> str:
    shown = [(key, value) for key, value in facts if value is not None]
    rows = "".join(f"<dt>{escape_html(key)}</dt><dd>{escape_html(value)}</dd>" for key, value in shown)
    return f"<dl>{rows}</dl>"


# Nothing may be fetched: the report must work offline and must not phone home. Vega compiles
# its expressions with Function (hence unsafe-eval); the bundle is imported from a blob: URL.
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval' blob:; "
    "style-src 'unsafe-inline'; img-src data: blob:"
)
#: The live page (:mod:`calwatch.publish.server`) also fetches newer snapshots from its own server.
LIVE_CSP = _CSP + "; connect-src 'self'; base-uri 'none'; form-action 'none'"

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
  max-width: 1180px; padding: 0 16px; color: #1f2328; }}
h1 {{ font-size: 22px; margin: 0 0 2px; }} h2 {{ font-size: 17px; margin: 28px 0 8px; }}
.generated {{ color: #59636e; margin: 0 0 16px; }} .empty {{ color: #59636e; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }}
th, td {{ border: 1px solid #d1d9e0; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f6f8fa; }} dl {{ display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; }}
dt {{ color: #59636e; }} dd {{ margin: 0; }} #calwatch-error {{ color: #b42318; white-space: pre-wrap; }}
.verdict {{ font-size: 16px; font-weight: 600; margin: 4px 0 6px; }}
ul.promises, ul.warning-lines {{ list-style: none; padding: 0; margin: 4px 0 12px; }}
ul.promises li, ul.warning-lines li {{ margin: 3px 0; }}
.state {{ display: inline-block; min-width: 62px; padding: 0 6px; border-radius: 9px; font-size: 12px;
  text-align: center; color: #fff; background: #59636e; }}
.state-holding {{ background: #1a7f37; }} .state-at-risk {{ background: #9a6700; }}
.state-broken {{ background: #b42318; }} .state-waiting {{ background: #818b98; }}
ul.warning-lines li::before {{ content: "⚠ "; color: #9a6700; }}
ul.warning-lines li[data-state="closed"] {{ color: #59636e; }}
ul.warning-lines li[data-state="closed"]::before {{ content: "✓ "; color: #1a7f37; }}
details.warning-card {{ border: 1px solid #d1d9e0; border-radius: 6px; padding: 6px 10px; margin: 6px 0; }}
details.warning-card[data-state="open"] {{ border-left: 4px solid #b42318; }}
details.warning-card[data-state="acknowledged"] {{ border-left: 4px solid #9a6700; }}
details.warning-card > summary {{ cursor: pointer; font-weight: 600; }}
details.fine-print > summary, details.setup > summary {{ cursor: pointer; color: #59636e; }}
details.setup {{ margin-top: 28px; }}
</style>
</head>
<body>
<h1>{heading}</h1>
<p id="calwatch-generated" class="generated">{generated}</p>
{live_line}
<div id="calwatch-headline">{headline}</div>
<div id="calwatch-view"></div>
<div id="calwatch-error" role="alert"></div>
<div id="calwatch-sections">
{sections}
</div>
<script id="calwatch-state" type="application/json">{payload}</script>
<script id="calwatch-bundle" type="application/json">{bundle}</script>
<script type="module">
const read = (id) => JSON.parse(document.getElementById(id).textContent);
const fail = (error) => {{
  document.getElementById("calwatch-error").textContent = "The dashboard could not be drawn: " + error;
}};
{script}
</script>
</body>
</html>
"""

# The report: draw the saved dashboard once.
_STATIC_SCRIPT = """try {
  const code = Uint8Array.from(atob(read("calwatch-bundle")), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  const widget = await import(url);
  const state = read("calwatch-state");
  widget.renderStatic(document.getElementById("calwatch-view"), state.model, state.datasets);
  document.body.dataset.rendered = "true";
} catch (error) {
  fail(error);
}"""

# The live page: draw the snapshot it came with, then wait on the server for a newer version
# (a long poll: api/version?after=<shown> answers when the snapshot changes, or after a while
# with the same version) and redraw it in place: the widget's traits and datasets through
# renderLive's update (no re-embed), the sections' escaped HTML, built by the server like the
# report's. The token travels in an Authorization header, never in these URLs.
_LIVE_SCRIPT = """const token = new URLSearchParams(location.search).get("token") ?? "";
const headers = { Authorization: "token " + token };
const live = document.getElementById("calwatch-live");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let view = null;
let version = null;
const show = (widget, data) => {
  const el = document.getElementById("calwatch-view");
  if (view === null) view = widget.renderLive(el, data.model, data.datasets);
  else view.update(data.model, data.datasets);
  if (data.sections !== undefined) {
    document.getElementById("calwatch-sections").innerHTML = data.sections;
    document.getElementById("calwatch-headline").innerHTML = data.headline ?? "";
    document.getElementById("calwatch-generated").textContent = data.generated;
  }
  version = data.version;
  document.body.dataset.version = version;
  document.body.dataset.updates = String(Number(document.body.dataset.updates ?? "-1") + 1);
  document.body.dataset.rendered = "true";
};
const get = async (path) => {
  const response = await fetch(path, { headers, cache: "no-store" });
  if (!response.ok) throw new Error(`${path.split("?")[0]}: HTTP ${response.status}`);
  return response.json();
};
try {
  const code = Uint8Array.from(atob(read("calwatch-bundle")), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  const widget = await import(url);
  show(widget, read("calwatch-state"));
  live.textContent = "Live: updates as the snapshot is saved.";
  let failures = 0;
  for (;;) {
    try {
      const latest = await get(`api/version?after=${encodeURIComponent(version)}`);
      if (latest.version !== version) show(widget, await get("api/report"));
      live.textContent = `Live: snapshot saved ${latest.saved_at}, ${latest.batches} batches.` +
        (latest.error ? ` The newest snapshot could not be read: ${latest.error}` : "");
      failures = 0;
    } catch (error) {
      failures += 1;
      live.textContent = `Not updating (${error.message}); retrying.`;
      await sleep(Math.min(5000, 250 * 2 ** failures));
    }
  }
} catch (error) {
  fail(error);
}"""
