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


def test_the_first_screen_says_what_holds_and_what_broke_by_the_strip_rule(monitor):
    from calwatch.widget.payloads import health_rows

    page = render_report(monitor)
    head = page.split('<div id="calwatch-headline">', 1)[1].split('<div id="calwatch-view">', 1)[0]
    chips = health_rows(monitor)
    states = re.findall(r'<li class="chip-line" data-state="([^"]+)">', head)
    assert states == [c["state"] for c in chips]  # one line per calibrator, the strip's state
    counts = {s: states.count(s) for s in set(states)}
    verdict = re.search(r'<p class="verdict">(.*?)</p>', head).group(1)
    assert verdict.startswith(f"{len(chips)} promises: ")
    for state, n in counts.items():
        assert f"{n} {state}" in verdict
    warnings = monitor.warnings()
    n_ack = int(warnings["acknowledged"].sum())
    assert f"{len(warnings)} warning" in verdict and f"{n_ack} acknowledged" in verdict
    first = int(warnings["first_batch"][0])
    assert f"open since batch {first} (acknowledged); evidence from batches {first}–" in head


def test_warnings_are_cards_with_the_fine_print_behind_details(monitor):
    page = render_report(monitor)
    sections = page.split('<div id="calwatch-sections">', 1)[1]
    cards = re.findall(r'<details class="warning-card" data-state="(\w+)"', sections)
    assert len(cards) == len(monitor.warnings()) > 0
    assert cards[0] == "acknowledged"  # the fixture acknowledged episode 0
    assert '<details class="fine-print"><summary>details</summary>' in sections
    assert "<th>false_alarm_control</th>" not in page  # no 12-column table of paragraphs
    assert "P(any false alarm" in sections  # the bound is still there, behind the toggle


def test_the_first_screen_names_batches_and_states_promises_before_any_batch():
    from calwatch.publish.headline import headline_html
    from calwatch.views.shift_lanes import batch_label, warning_line

    from ..synthetic import softmax_data

    probs, y = softmax_data(400, seed=1)
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    assert "Not calibrated yet" in headline_html(mon)
    mon.calibrate(probs=probs[:200], y=y[:200])
    waiting = headline_html(mon)
    assert "Waiting for the first batch" in waiting and "90% coverage" in waiting
    mon.observe(probs=probs[200:300])
    mon.observe(probs=probs[300:], name="2009 #12")
    assert batch_label(mon, 0) == "batch 0"
    assert batch_label(mon, 1) == "batch 1 (2009 #12)"
    row = {"name": "coverage drop", "first_batch": 1, "last_batch": 1, "first_row": 100, "last_row": 199,
           "open": True, "acknowledged": False, "threatens": "lac"}  # fmt: skip
    assert warning_line(mon, row) == (
        "coverage drop: open since batch 1 (2009 #12); evidence from batch 1, rows 100–199; threatens lac"
    )
