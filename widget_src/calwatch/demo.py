"""The ``python -m calwatch demo`` walk-through: a real model watched over a real, shifting stream.

A late-arrival classifier for NYC flights 2013 (trained on January-March, see
:func:`calwatch.datasets.flights_task`) is calibrated on April and watched from May to
December, one month a batch. Labels (did the flight arrive more than 15 minutes late?) arrive
one month late: when June is observed, May's labels come in; December's arrive at the end.
Two calibrators run side by side: randomised APS (one threshold for all flights) and LAC by
class (one threshold per true class), both at α = 0.1. The demo prints a table per month and per class
and writes every chart of :data:`calwatch.views.charts.CHARTS` into one self-contained HTML page.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from calwatch.engine.conformal.classifier import SplitConformalClassifier
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.monitor.monitor import Monitor
from calwatch.views import charts

#: File name of the charts page written into the output folder.
DEMO_HTML = "calwatch-demo.html"
#: Width in pixels of each chart on the page (one column of charts).
CHART_WIDTH = 720
# Any http(s) URL of a script host: the page must not fetch code at run time.
_CDN_URL = re.compile(r"https?://[^\s\"'<>]*(?:cdn|jsdelivr|unpkg|esm\.sh|skypack)", re.IGNORECASE)
_SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc\s*=", re.IGNORECASE)

Echo = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    """What :func:`run_demo` produced.

    Attributes
    ----------
    monitor : Monitor
        The monitor after the whole stream, every month labelled.
    summary : polars.DataFrame
        One row per month and calibrator (:func:`monthly_summary`).
    class_coverage : polars.DataFrame
        Coverage by true class over the whole stream, per calibrator.
    html : pathlib.Path
        The charts page.
    timings : dict of str to float
        Wall seconds of each step: ``data_and_model``, ``calibrate``, ``stream``, ``charts``
        and ``total``.
    """

    monitor: Monitor
    summary: pl.DataFrame
    class_coverage: pl.DataFrame
    html: Path
    timings: dict[str, float]


def demo_calibrators(alpha: float = 0.1, seed: int = 0) -> dict[str, SplitConformalClassifier]:
    """The demo's two calibrators: marginal APS and label-conditional (Mondrian) LAC.

    APS is the randomised form. With two classes the deterministic form (``u = 1``) scores a
    true label ranked second as exactly ``p_1 + p_2 = 1``; this model is wrong on 12% of
    April's flights, more than α = 10%, so its threshold is 1 and every set would hold both
    classes (coverage 1, set size 2, every month).
    """
    return {
        "aps": SplitConformalClassifier(score="aps", alpha=alpha, randomized=True, seed=seed),
        "lac-by-class": SplitConformalClassifier(score="lac", alpha=alpha, mondrian="label"),
    }


def run_demo(out_dir: str | Path, *, seed: int = 0, alpha: float = 0.1, echo: Echo = print) -> DemoResult:
    """Stream NYC flights May-December through a :class:`Monitor`, print tables, write charts.

    Parameters
    ----------
    out_dir : str or pathlib.Path
        Folder for :data:`DEMO_HTML` (created if missing).
    seed : int
        Seed of the flights model.
    alpha : float
        Miscoverage level of both calibrators.
    echo : callable
        Where the progress lines and tables go (default :func:`print`).

    Returns
    -------
    DemoResult
    """
    from calwatch.datasets import flights_task

    start = time.perf_counter()
    timings: dict[str, float] = {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    echo("calwatch demo: NYC flights 2013, is a flight going to arrive > 15 min late?")
    task = flights_task(seed=seed)
    timings["data_and_model"] = time.perf_counter() - start
    echo(
        f"  model: gradient boosting on what is known at departure, trained on January-March "
        f"({task.n_train:,} flights, fit in {task.fit_seconds:.1f} s)"
    )

    step = time.perf_counter()
    monitor = Monitor(
        task.model, calibrators=demo_calibrators(alpha, seed), name="NYC flights 2013: late arrivals"
    )
    monitor.calibrate(task.X_cal, task.y_cal)
    timings["calibrate"] = time.perf_counter() - step
    echo(f"  calibrated on April ({len(task.y_cal):,} flights), target coverage {1 - alpha:.0%}\n")

    step = time.perf_counter()
    previous = None
    for batch in task.stream:
        index = monitor.observe(batch.X, ids=batch.ids, name=batch.name)
        line = f"  {batch.name:<9} {len(batch.ids):>7,} flights observed"
        if previous is not None:
            monitor.label(previous.ids, previous.y)
            line += f" | {previous.name}'s labels arrive: " + _coverage_line(monitor, index - 1)
        echo(line)
        previous = batch
    if previous is not None:
        monitor.label(previous.ids, previous.y)
        last = monitor.n_batches - 1
        echo(f"  (end)     {previous.name}'s labels arrive: " + _coverage_line(monitor, last))
    timings["stream"] = time.perf_counter() - step

    summary = monthly_summary(monitor)
    by_class = monitor.class_coverage(by_batch=False)
    echo("\nPer month (coverage of labelled flights with its 95% Clopper-Pearson interval):")
    echo(_format_table(_printable_summary(summary)))
    echo("\nCoverage by true class, per month:")
    echo(_format_table(_class_coverage_by_month(monitor)))
    echo("\nWhole stream:")
    echo(_format_table(_stream_totals(summary, by_class)))

    step = time.perf_counter()
    html = write_charts_html(monitor, out / DEMO_HTML)
    timings["charts"] = time.perf_counter() - step
    timings["total"] = time.perf_counter() - start
    echo(f"\nCharts: {html}")
    echo(
        "Wall time: {total:.1f} s (data and model {data_and_model:.1f} s, calibration "
        "{calibrate:.1f} s, stream {stream:.1f} s, charts {charts:.1f} s)".format(**timings)
    )
    return DemoResult(monitor, summary, by_class, html, timings)


def _coverage_line(monitor: Monitor, batch: int) -> str:
    rows = monitor.summary((batch,))
    parts = [f"{r['calibrator']} {r['coverage']:.3f}" for r in rows.iter_rows(named=True)]
    return "coverage " + ", ".join(parts)


def monthly_summary(monitor: Monitor) -> pl.DataFrame:
    """The per-month table: one row per month and calibrator.

    Columns ``month, calibrator, flights, labelled, pending, coverage, coverage_lo,
    coverage_hi, mean_set_size, singleton_share`` (coverage null while a month has no labels).
    """
    return monitor.summary().select(
        pl.col("name").alias("month"),
        "calibrator",
        pl.col("n_rows").alias("flights"),
        pl.col("n_labelled").alias("labelled"),
        pl.col("n_pending").alias("pending"),
        "coverage",
        "coverage_lo",
        "coverage_hi",
        "mean_set_size",
        "singleton_share",
    )


def _interval(lo: pl.Series, hi: pl.Series) -> pl.Series:
    """``"[0.893, 0.905]"`` per row; null where the interval is undefined (no labels)."""
    text = [
        None if a is None or b is None else f"[{a:.3f}, {b:.3f}]"
        for a, b in zip(lo.to_list(), hi.to_list(), strict=True)
    ]
    return pl.Series("95% CI", text, dtype=pl.String)


def _printable_summary(summary: pl.DataFrame) -> pl.DataFrame:
    return summary.select(
        "month",
        "calibrator",
        "flights",
        "labelled",
        "pending",
        pl.col("coverage").round(3),
        _interval(summary["coverage_lo"], summary["coverage_hi"]),
        pl.col("mean_set_size").round(3).alias("mean size"),
        pl.col("singleton_share").round(3).alias("singletons"),
    )


def _class_coverage_by_month(monitor: Monitor) -> pl.DataFrame:
    names = monitor.summary().select("batch", pl.col("name").alias("month")).unique("batch")
    table = (
        monitor.class_coverage()
        .join(names, on="batch")
        .with_columns(column=pl.format("{}: {}", "calibrator", "class"), coverage=pl.col("coverage").round(3))
        .sort("batch")
    )
    return table.pivot(on="column", index=["batch", "month"], values="coverage", sort_columns=True).drop(
        "batch"
    )


def _stream_totals(summary: pl.DataFrame, by_class: pl.DataFrame) -> pl.DataFrame:
    totals = (
        summary.group_by("calibrator", maintain_order=True)
        .agg(
            pl.col("flights").sum(),
            pl.col("labelled").sum(),
            covered=(pl.col("coverage") * pl.col("labelled")).sum().round().cast(pl.Int64),
            size_sum=(pl.col("mean_set_size") * pl.col("flights")).sum(),
        )
        .with_columns(
            coverage=pl.col("covered") / pl.col("labelled"), mean_size=pl.col("size_sum") / pl.col("flights")
        )
    )
    lo, hi = clopper_pearson(totals["covered"].to_numpy(), totals["labelled"].to_numpy())
    worst = by_class.sort("coverage").group_by("calibrator", maintain_order=True).first()
    return (
        totals.with_columns(coverage_lo=pl.Series(lo), coverage_hi=pl.Series(hi))
        .join(
            worst.select(
                "calibrator", pl.col("class").alias("worst class"), pl.col("coverage").alias("its coverage")
            ),
            on="calibrator",
        )
        .select(
            "calibrator",
            "flights",
            pl.col("coverage").round(3),
            _interval(pl.Series(lo), pl.Series(hi)),
            pl.col("mean_size").round(3).alias("mean size"),
            "worst class",
            pl.col("its coverage").round(3),
        )
    )


def _format_table(frame: pl.DataFrame) -> str:
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=200,
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
        thousands_separator=True,
        float_precision=3,
    ):
        return str(frame)


def charts_page(monitor: Monitor) -> dict[str, Any]:
    """One Vega-Lite spec with the charts that apply to the monitor, stacked.

    The charts are :func:`calwatch.views.charts.chart_kinds`'s, in its order.
    Charts of calibrator kinds the monitor does not have are left out: their datasets are empty,
    and an empty chart in a concatenation gives Vega infinite extents (every chart drawn on top of
    the others). The charts' shared ``calibrator`` parameter is bound to a drop-down on the page.
    """
    import altair as alt

    kinds = charts.chart_kinds(monitor)
    views: list[Any] = [monitor.chart(kind).properties(width=CHART_WIDTH) for kind in kinds]
    page = (
        alt.vconcat(*views, spacing=40)
        # Each chart keeps its own axes, colours and legend (a concatenation shares them by default,
        # and the labels chart's fixed colour domain would then hide every calibrator's marks).
        .resolve_scale(x="independent", y="independent", color="independent", strokeDash="independent")
        .resolve_legend(color="independent", strokeDash="independent")
        .properties(title=monitor.name)
    )
    spec: dict[str, Any] = page.to_dict()
    options = [charts.ALL_CALIBRATORS, *monitor.calibrators]
    # The charts' other parameters (batch names for the axes, the picked detector) stay as declared.
    others = [p for p in spec.get("params", []) if p.get("name") != charts.CALIBRATOR_PARAM]
    spec["params"] = [
        {
            "name": charts.CALIBRATOR_PARAM,
            "value": charts.ALL_CALIBRATORS,
            "bind": {"input": "select", "options": options, "name": "calibrator "},
        },
        *others,
    ]
    return spec


def write_charts_html(monitor: Monitor, path: str | Path) -> Path:
    """Write :func:`charts_page` as one self-contained HTML file (Vega's JavaScript inlined).

    Raises
    ------
    ImportError
        When ``vl-convert-python`` (which holds the JavaScript bundle) is not installed.
    RuntimeError
        If the page would load anything from a CDN.
    """
    import altair as alt

    try:
        import vl_convert  # noqa: F401  (altair's inline mode reads its bundled JavaScript)
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        msg = "writing a self-contained charts page needs vl-convert-python: pip install vl-convert-python"
        raise ImportError(msg) from err
    target = Path(path)
    page = alt.VConcatChart.from_dict(charts_page(monitor), validate=False)
    page.save(target, format="html", inline=True, embed_options={"actions": False})
    found = _network_reference(target.read_text(encoding="utf-8"))
    if found is not None:
        target.unlink()
        msg = f"the charts page would load code from the network ({found!r}); not written"
        raise RuntimeError(msg)
    return target


def _network_reference(text: str) -> str | None:
    found = _CDN_URL.search(text) or _SCRIPT_SRC.search(text)
    return None if found is None else found.group(0)


def html_is_self_contained(text: str) -> bool:
    """Whether an HTML page loads no script from a URL (no ``<script src=…>``, no CDN link)."""
    return _network_reference(text) is None


__all__ = [
    "DEMO_HTML",
    "DemoResult",
    "charts_page",
    "demo_calibrators",
    "html_is_self_contained",
    "monthly_summary",
    "run_demo",
    "write_charts_html",
]
