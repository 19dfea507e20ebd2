"""The static notebook outputs (calwatch.notebook_output): escaping, the sanitiser, refreshes."""

from __future__ import annotations

import base64
import re
import threading
import time
from html.parser import HTMLParser
from typing import Any

import numpy as np

import calwatch as cw
from calwatch import charts, notebook_output

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
    # the coverage chart as an SVG image (a data: URL), drawn in the kernel from the stream
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
