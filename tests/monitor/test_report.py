"""Standalone HTML reports: content, escaping, the command line (rendering: tests/ui)."""

import json
import re

import pytest

import calwatch as cw
from calwatch.__main__ import main
from calwatch.publish.report import render_report

from ..synthetic import pets_monitor

INJECTION = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def monitor():
    mon = pets_monitor()
    mon.provenance["dataset"] = "synthetic pets </script><script>alert(2)</script>"
    mon.acknowledge(0, note=f"seen {INJECTION}", by="bo")
    return mon


def _embedded(page, element_id):
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def test_report_holds_every_panel_and_the_logs(monitor):
    page = render_report(monitor)
    state = _embedded(page, "calwatch-state")
    from calwatch.views import charts, dashboard

    assert state["model"]["_chart_order"] == charts.chart_kinds(monitor)
    assert set(state["datasets"]) == {*charts.CHART_DATASETS, *dashboard.PANEL_DATASETS}
    assert len(state["datasets"]["overview"]) == len(monitor.calibrators)  # one card each
    assert len(state["datasets"]["batches"]) == len(monitor.summary())
    assert len(state["model"]["_warnings"]) == len(monitor.warnings()) > 0
    for heading in ("Warnings", "Notes", "Coverage by calibrator", "Configuration", "Provenance"):
        assert f"<h2>{heading}</h2>" in page
    assert "drift starts &lt;b&gt;here&lt;/b&gt;" in page  # the note, escaped
    assert "SplitConformalClassifier(score=&#x27;lac&#x27;" in page  # configuration
    assert "none (precomputed outputs)" in page  # provenance: the model


def test_user_text_never_reaches_the_page_unescaped(monitor):
    page = render_report(monitor)
    assert INJECTION not in page
    assert "<script>alert(2)" not in page
    assert page.count("</script>") == 3  # the state, the bundle and the loader: nothing ended early
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # shown as text in the tables
    state = _embedded(page, "calwatch-state")
    assert INJECTION in json.dumps(state)  # the widget receives the real name, sets it as text


def test_command_line_writes_a_report_of_a_snapshot(monitor, tmp_path, capsys):
    monitor.save(tmp_path / "snap")
    assert main(["report", str(tmp_path / "snap")]) == 0
    out = tmp_path / "snap.html"
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    assert "snapshot saved at" in page and str((tmp_path / "snap").resolve()) in page
    assert main(["report", str(tmp_path / "snap"), "-o", str(tmp_path / "r" / "x.html")]) == 0
    assert (tmp_path / "r" / "x.html").is_file()


def test_command_line_reports_a_broken_snapshot_without_a_traceback(tmp_path, capsys):
    (tmp_path / "nothing").mkdir()
    assert main(["report", str(tmp_path / "nothing")]) == 1
    assert "has no manifest.json" in capsys.readouterr().err
    assert not (tmp_path / "nothing.html").exists()


def test_report_of_a_monitor_without_batches(tmp_path):
    mon = cw.Monitor()
    path = mon.report(tmp_path / "empty.html")
    page = path.read_text()
    assert "No batches observed." in page and "(not calibrated)" in page
