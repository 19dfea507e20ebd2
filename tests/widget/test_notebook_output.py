"""The static notebook outputs (calwatch.publish.notebook_output): escaping, the sanitiser, refreshes."""

from __future__ import annotations

import base64
import re
import threading
import time
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

import calwatch as cw
from calwatch.publish import notebook_output
from calwatch.views import charts

from ..synthetic import PET_CLASSES, pets_monitor, softmax_data

#: JupyterLab 4's sanitiser for untrusted outputs (``@jupyterlab/apputils`` Sanitizer): the tags it
#: keeps (no ``svg``, ``script`` or ``style``); ``img`` keeps its ``src`` whatever the scheme
#: (schemes are checked on ``href`` and ``cite`` only), so a ``data:`` image shows.
SANITISER_TAGS = {
    "a", "abbr", "b", "br", "caption", "code", "dd", "details", "div", "dl", "dt", "em", "h1",
    "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "li", "ol", "p", "pre", "section", "small",
    "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
    "tr", "u", "ul",
}  # fmt: skip


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs))


def _fallback(page: str) -> str:
    start = page.index('<div class="calwatch-static-fallback">')
    return page[start : page.index('<div class="calwatch-static-view">')]


def test_fallback_survives_the_sanitiser_and_escapes_user_text():
    hostile = "<b onclick=alert(2)>lac</b>"
    mon = pets_monitor(calibrators={hostile: cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    page = notebook_output.dashboard_html(mon, "calwatch-static-t")
    fallback = _fallback(page)
    parsed = _Tags()
    parsed.feed(fallback)
    assert set(parsed.tags) <= SANITISER_TAGS, set(parsed.tags) - SANITISER_TAGS
    # the coverage chart as an SVG image (a data: URL), drawn from the stream (in a child process)
    (image,) = parsed.images
    assert str(image["src"]).startswith("data:image/svg+xml;base64,")
    svg = base64.b64decode(str(image["src"]).split(",", 1)[1]).decode("utf-8")
    assert "role-mark" in svg and "Coverage vs target" in svg
    # key numbers as text: counters, each calibrator's promise and state, coverage by calibrator
    text = re.sub(r"<[^>]+>", " ", fallback)
    status = mon.status()
    assert f"{status['batches']:,} batches" in text and f"{status['rows_seen']:,} rows" in text
    assert "90% coverage" in text
    # user text (calibrator and class names) is escaped everywhere, in the fallback and the JSON
    assert PET_CLASSES[2] not in page and hostile not in page
    assert "&lt;b onclick=alert(2)&gt;lac&lt;/b&gt;" in fallback
    assert "\\u003cimg src=x onerror=alert(1)\\u003e" in page


def test_static_output_refreshes_only_when_the_stream_changed(monkeypatch):
    import IPython.display

    calls: list[tuple[str, dict[str, Any], str]] = []
    monkeypatch.setattr(
        IPython.display, "display", lambda b, raw, display_id: calls.append(("display", b, display_id))
    )
    monkeypatch.setattr(
        IPython.display, "update_display", lambda b, raw, display_id: calls.append(("update", b, display_id))
    )
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, name="r")
    P, y = softmax_data(300, seed=1)
    mon.calibrate(probs=P, y=y)
    static = notebook_output.static_for(mon.widget())
    assert notebook_output.static_for(mon.widget()) is static  # one per widget
    assert static.refresh() is False  # never displayed: nothing to update
    static.display()
    assert [c[0] for c in calls] == ["display"] and "0 batches" in calls[0][1]["text/html"]
    assert static.refresh() is False  # nothing changed since
    P, y = softmax_data(50, seed=2)
    mon.observe(probs=P, y=y)
    notebook_output._refresh_all()  # what a cell's end runs
    assert [c[0] for c in calls] == ["display", "update"]
    assert calls[1][2] == calls[0][2] == static.display_id
    assert "1 batches" in calls[1][1]["text/html"]
    assert static.refresh() is False


def test_a_producer_threads_changes_redraw_the_static_output_only_when_due(monkeypatch):
    """Cells run while a producer thread feeds the monitor do not each rebuild the whole output."""
    import IPython.display

    calls: list[str] = []
    monkeypatch.setattr(IPython.display, "display", lambda b, raw, display_id: calls.append("display"))
    monkeypatch.setattr(IPython.display, "update_display", lambda b, raw, display_id: calls.append("update"))
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, name="p")
    P, y = softmax_data(300, seed=1)
    mon.calibrate(probs=P, y=y)
    static = notebook_output.static_for(mon.widget())
    static.display()

    def produce(seed: int) -> None:
        P, y = softmax_data(50, seed=seed)
        mon.observe(probs=P, y=y)

    for seed in range(2, 5):  # three cells end while a producer thread streams
        thread = threading.Thread(target=produce, args=(seed,))
        thread.start()
        thread.join()
        notebook_output._refresh_all()
    assert calls == ["display"]  # drawn 0 s ago: not due
    assert static.render_s > 0 and not static.due()
    monkeypatch.setattr(notebook_output, "STATIC_MIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(notebook_output, "STATIC_COST_SHARE", 1.0)  # due once a drawing's time has passed
    time.sleep(static.render_s)
    notebook_output._refresh_all()
    assert calls == ["display", "update"]  # due: the producer's batches are drawn
    monkeypatch.setattr(notebook_output, "STATIC_MIN_INTERVAL_S", 3600.0)
    produce(9)  # a change in the main thread (the cell's own): drawn at the cell's end
    notebook_output._refresh_all()
    assert calls == ["display", "update", "update"]
    thread = threading.Thread(target=produce, args=(10,))
    thread.start()
    thread.join()
    assert static.refresh() is False and static.refresh(force=True) is True


def test_chart_output_is_static_svg_and_png_of_the_same_chart():
    mon = pets_monitor()
    chart = mon.chart("coverage")
    assert chart.to_dict() == charts.build("coverage", mon).to_dict()
    bundle = chart._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "image/png", "text/plain"}  # no script, no widget
    assert "role-mark" in bundle["image/svg+xml"]
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_empty_stream_still_gives_an_output():
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, name="e")
    P, y = softmax_data(200, seed=3)
    mon.calibrate(probs=P, y=np.asarray(y))
    assert mon.n_batches == 0
    page = notebook_output.dashboard_html(mon, "calwatch-static-e")
    assert "0 batches" in _fallback(page) and "<img" not in _fallback(page)
    assert "image/svg+xml" in mon.chart("coverage")._repr_mimebundle_()


def _keyed(datasets: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {name: {r["key"]: r for r in rows} for name, rows in datasets.items()}


def test_the_static_copy_takes_the_views_rows_and_shows_what_a_rebuild_shows(monkeypatch):
    """Past the display's bucketing, with late labels and notes: the same page, without a rebuild."""
    from calwatch.views import resolution

    monkeypatch.setattr(resolution, "MAX_POINTS", 4)  # six batches: buckets of two
    mon = pets_monitor()
    widget = mon.widget()
    static = notebook_output.static_for(widget)
    fast = static._read(widget)
    assert static.rebuilt is False
    slow = notebook_output.read_static(mon)  # every dataset from the monitor
    assert fast.parts.payload["model"] == slow.parts.payload["model"]
    held, rebuilt = _keyed(fast.parts.payload["datasets"]), _keyed(slow.parts.payload["datasets"])
    assert held.keys() == rebuilt.keys() and held["batches"] and held["timeline"]
    for name, rows in rebuilt.items():
        assert held[name].keys() == rows.keys(), name
        for key, row in rows.items():
            for field, value in row.items():  # the cards are running sums: equal to rounding
                mine = held[name][key][field]
                same = mine == value or (isinstance(value, float) and abs(mine - value) <= 1e-12)
                assert same, f"{name}[{key}].{field}: {mine} != {value}"
    assert (fast.headline, fast.table) == (slow.headline, slow.table)
    assert fast.coverage is not None and slow.coverage is not None
    drawn = notebook_output._coverage_spec(fast.coverage)
    assert drawn == notebook_output._coverage_spec(slow.coverage) == charts.build("coverage", mon).to_dict()
    pages = [_fallback(notebook_output.draw_static(read, static.uid)) for read in (fast, slow)]
    assert pages[0].replace(fast.parts.generated, "") == pages[1].replace(slow.parts.generated, "")


def _same_tables(cards: list[dict[str, Any]], mon: cw.Monitor) -> None:
    """The coverage table summed from the widget's cards is the one summed from the summary."""
    from polars.testing import assert_frame_equal

    from calwatch.publish import report

    mine, theirs = report._coverage_from_cards(cards), report._coverage_from_summary(mon.summary())
    assert not mine[0].is_empty()
    for a, b in zip(mine, theirs, strict=True):  # counts exactly; row-weighted means to float rounding
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12, abs_tol=0.0, check_dtypes=False)


def test_the_static_copy_sums_the_cards_and_keeps_no_frame_of_every_batch(monkeypatch):
    """Relabels and a batch with no labels: the cards' table is the summary's.

    The static copy refreshes every 30 s while a stream runs; summing the summary kept its frame of
    every batch (:mod:`calwatch.core.frame_cache`) in the kernel, ~400 bytes a batch for good.
    """
    from calwatch.core.frame_cache import CACHES_ATTRIBUTE

    names = np.array(PET_CLASSES)
    mon = pets_monitor()
    widget = mon.widget()
    static = notebook_output.static_for(widget)
    read = static._read(widget)
    assert static.rebuilt is False
    assert "summary" not in mon.__dict__.get(CACHES_ATTRIBUTE, {})  # the read made no whole-stream frame
    assert read.table == notebook_output.read_static(mon).table
    _same_tables(widget.current_datasets()["overview"], mon)

    _, y = softmax_data(400, seed=7)
    mon.label([f"b2-{i}" for i in range(200)], names[y[:200]])  # relabels: old counts taken out
    P, _ = softmax_data(300, seed=8)
    mon.observe(probs=P, ids=[f"b6-{i}" for i in range(300)])  # no labels yet
    datasets = widget.current_datasets()
    assert datasets is not None
    _same_tables(datasets["overview"], mon)
    assert static._read(widget).table == notebook_output.read_static(mon).table

    fresh = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
                                    "risk": cw.RiskEstimator()}, name="unlabelled")  # fmt: skip
    P, y = softmax_data(300, seed=9)
    fresh.calibrate(probs=P, y=np.asarray(y))
    fresh_widget = fresh.widget()
    fresh.observe(probs=P[:50], ids=list(range(50)))  # nothing labelled: coverage 0 / 0
    cards = fresh_widget.current_datasets()["overview"]
    _same_tables(cards, fresh)
    assert "nan" in notebook_output.read_static(fresh, fresh_widget.current_datasets()).table


def test_the_static_copy_rebuilds_when_the_views_rows_are_not_the_streams(monkeypatch):
    mon = pets_monitor()
    widget = mon.widget()
    static = notebook_output.static_for(widget)
    monkeypatch.setattr(notebook_output, "CURRENT_WAIT_S", 30.0)
    widget.batch_range = (1, 3)  # the views show a brushed range: not the whole stream
    started = time.monotonic()
    static._read(widget)
    assert static.rebuilt is True
    assert time.monotonic() - started < 15.0  # rebuilt at once: no change is on its way
    widget.batch_range = None
    static._read(widget)
    assert static.rebuilt is False
    # A change whose notification is still on its way to the widget: wait for it, then rebuild.
    monkeypatch.setattr(notebook_output, "CURRENT_WAIT_S", 0.05)
    guard = notebook_output.guard_of(mon)
    guard.count_undelivered(1)
    started = time.monotonic()
    static._read(widget)
    assert static.rebuilt is True and time.monotonic() - started >= 0.05
    # ... and when it arrives while the output waits, the views' rows are taken after all.
    monkeypatch.setattr(notebook_output, "CURRENT_WAIT_S", 30.0)
    threading.Timer(0.1, guard.count_undelivered, args=(-1,)).start()
    static._read(widget)
    assert static.rebuilt is False and guard.undelivered == 0

    # An update of the widget that raised may have left its rows part-updated: rebuild until the
    # next full send.
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("injected")

    monkeypatch.setattr(widget, "_bucket_update", broken)
    P, _ = softmax_data(40, seed=77)
    with pytest.warns(RuntimeWarning, match="injected"):
        mon.observe(probs=P, ids=[f"late-{i}" for i in range(40)])
    monkeypatch.undo()
    static._read(widget)
    assert static.rebuilt is True
    widget.refresh_layout()
    static._read(widget)
    assert static.rebuilt is False


def test_a_call_owes_its_notifications_until_every_listener_returned():
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)}, name="n")
    P, y = softmax_data(300, seed=1)
    mon.calibrate(probs=P, y=y)
    guard = notebook_output.guard_of(mon)
    seen: list[int] = []
    mon.subscribe(lambda batches: seen.append(guard.undelivered))
    mon.observe(probs=P[:50], ids=[f"a{i}" for i in range(50)])
    mon.label([f"a{i}" for i in range(50)], y[:50])
    assert seen == [1, 1] and guard.undelivered == 0
    with pytest.raises(ValueError, match="ids"):
        mon.observe(probs=P[:5], ids=["a0", "a1", "a2", "a3", "a4"])  # ids seen before: refused
    assert seen == [1, 1] and guard.undelivered == 0  # a refused call owes nothing


def test_the_static_coverage_image_is_drawn_in_a_child_process_the_same_svg(monkeypatch):
    """vl-convert's JavaScript heap never shrinks, so the periodic static copy draws elsewhere."""
    vl_convert = pytest.importorskip("vl_convert", reason="installed by `make test`")
    from calwatch.publish import svg_child

    mon = pets_monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac", alpha=0.1)})
    read = notebook_output.read_static(mon)
    assert read.coverage is not None
    spec = notebook_output._coverage_spec(read.coverage)
    assert svg_child.vegalite_to_svg(spec) == vl_convert.vegalite_to_svg(spec)

    def refused(*_args: Any, **_kwargs: Any) -> str:
        raise AssertionError("drawn in the kernel")

    monkeypatch.setattr(vl_convert, "vegalite_to_svg", refused)  # this process must not draw it
    parsed = _Tags()
    parsed.feed(_fallback(notebook_output.draw_static(read, "calwatch-static-c")))
    (image,) = parsed.images
    svg = base64.b64decode(str(image["src"]).split(",", 1)[1]).decode("utf-8")
    assert "Coverage vs target" in svg


def test_a_spec_vl_convert_refuses_raises_with_its_reason_and_the_fallback_keeps_its_table():
    from calwatch.publish import svg_child

    with pytest.raises(RuntimeError, match=r"vl-convert failed in its child process: .+"):
        svg_child.vegalite_to_svg({"mark": "no-such-mark", "data": {"values": [{"a": 1}]}})
    assert notebook_output._svg_image({"mark": "no-such-mark"}, "x") == ""


def test_an_exported_notebook_reads_a_caption_not_an_object_address():
    # Where the live view cannot be drawn (nbconvert HTML, a viewer), a notebook shows the
    # widget's text/plain: it used to be '<calwatch.widget.MonitorWidget object at 0x...>'.
    mon = pets_monitor()
    bundle = mon.widget()._repr_mimebundle_()
    text = (bundle[0] if isinstance(bundle, tuple) else bundle)["text/plain"]
    assert text == f"calwatch dashboard: {mon.name} ({mon.n_batches} batches)"
    assert "object at 0x" not in text


def test_show_in_a_script_says_where_to_look_instead_of_printing_the_page(capsys):
    # Outside a Jupyter kernel there is no page to draw on: show() used to print ~1.3 MB of HTML.
    mon = pets_monitor()
    mon.show()
    out = capsys.readouterr().out
    assert len(out) < 400, len(out)
    assert "mon.report('report.html')" in out
    assert "calwatch serve" in out
    assert "<div" not in out and "<script" not in out  # no markup
