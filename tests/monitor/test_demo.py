"""``python -m calwatch demo``: real flights streamed through a monitor, tables and a charts page."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import calwatch
from calwatch.__main__ import main
from calwatch.datasets import load_flights
from calwatch.demo import DEMO_HTML, html_is_self_contained, run_demo
from calwatch.views import charts

MONTHS = ["May", "June", "July", "August", "September", "October", "November", "December"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo")
    lines: list[str] = []
    result = run_demo(out, echo=lines.append)
    return {"result": result, "text": "\n".join(lines), "out": out}


def test_summary_has_every_month_and_calibrator_labelled(demo: dict[str, Any]) -> None:
    summary: pl.DataFrame = demo["result"].summary
    assert summary.height == len(MONTHS) * 2
    assert summary["month"].unique(maintain_order=True).to_list() == MONTHS
    assert sorted(summary["calibrator"].unique().to_list()) == ["aps", "lac-by-class"]
    # Month sizes are the real ones (flights with a known arrival delay).
    per_month = load_flights().filter(pl.col("month") >= 5).group_by("month").len().sort("month")["len"]
    for calibrator in ("aps", "lac-by-class"):
        assert summary.filter(pl.col("calibrator") == calibrator)["flights"].to_list() == per_month.to_list()
    # Every month's labels arrived (the last one at the end): coverage is filled in.
    assert (summary["labelled"] == summary["flights"]).all()
    assert (summary["pending"] == 0).all()
    assert summary["coverage"].null_count() == 0
    assert (summary["coverage_lo"] <= summary["coverage"]).all()
    assert (summary["coverage"] <= summary["coverage_hi"]).all()
    assert ((summary["mean_set_size"] >= 1) & (summary["mean_set_size"] <= 2)).all()


def test_demo_counts_agree_with_the_monitor(demo: dict[str, Any]) -> None:
    result = demo["result"]
    status = result.monitor.status()
    assert status["rows_seen"] == status["rows_labelled"] == int(result.summary["flights"].sum()) // 2
    assert status["labels_unmatched"] == 0
    classes = result.class_coverage.filter(pl.col("calibrator") == "lac-by-class")
    assert sorted(classes["class"].to_list()) == ["late", "on time"]
    assert int(classes["n_labelled"].sum()) == status["rows_labelled"]


def test_demo_prints_the_tables_and_wall_time(demo: dict[str, Any]) -> None:
    text = demo["text"]
    for month in MONTHS:
        assert re.search(rf"^  {month}\s+[\d,]+ flights observed", text, re.MULTILINE), month
    assert "December's labels arrive" in text
    assert "Coverage by true class, per month" in text
    assert "lac-by-class: late" in text
    assert re.search(r"Wall time: \d+\.\d s", text)


def test_charts_page_is_self_contained(demo: dict[str, Any]) -> None:
    page = demo["out"] / DEMO_HTML
    assert page == demo["result"].html
    text = page.read_text(encoding="utf-8")
    assert re.search(r"cdn|jsdelivr|unpkg", text, re.IGNORECASE) is None
    assert re.search(r"<script[^>]*\bsrc\s*=", text, re.IGNORECASE) is None
    assert "vegaEmbed" in text and len(text) > 300_000  # the Vega bundle is inline
    # Every chart that applies to the monitor is on the page (found by its title, as JSON in the
    # inline spec); charts of kinds it does not have are not (they would be drawn empty).
    for kind in charts.chart_kinds(demo["result"].monitor):
        title = demo["result"].monitor.chart(kind).to_dict()["title"]
        assert json.dumps(title) in text, kind
    # The calibrator drop-down lists both calibrators.
    assert re.search(r'"options":\s*\[\s*"\(all\)",\s*"aps",\s*"lac-by-class"\s*\]', text)


def test_network_references_are_detected() -> None:
    assert html_is_self_contained("<script>vegaEmbed('#vis', {})</script>")
    assert not html_is_self_contained('<script src="https://cdn.jsdelivr.net/npm/vega@6"></script>')
    assert not html_is_self_contained('<script type="module" src="./vega.js"></script>')
    assert not html_is_self_contained('import("https://unpkg.com/vega-embed@7")')


def test_cli_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", tmp_path]) == 0
    out = capsys.readouterr().out
    assert "Per month" in out and "Wall time" in out
    page = tmp_path / DEMO_HTML
    assert page.is_file()
    assert html_is_self_contained(page.read_text(encoding="utf-8"))


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"calwatch {calwatch.__version__}"


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().err
