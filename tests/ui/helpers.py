"""Shared helpers of the real-browser tests: the notebook's kernel through the page, DOM hooks.

The DOM hooks are those of docs/widget-protocol.md: ``div.calwatch-widget`` with
``data-applied-seq``, ``data-replay-seq``, ``data-rows-<dataset>``, and one
``div.calwatch-chart[data-chart=<name>]`` per chart.
"""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from calwatch.views import charts

if TYPE_CHECKING:
    from .conftest import LabServer

# every chart of a monitor with set calibrators, a risk estimator and the default shift detectors
CHART_NAMES = [
    name
    for name in charts.CHARTS
    if name not in ("aci", *charts.ADMIT_CHARTS, *charts.SELECTIVE_CHARTS, *charts.REGRESSION_CHARTS)
]
SET_CHART_NAMES = [name for name in CHART_NAMES if name not in charts.RISK_CHARTS]
TIMEOUT_MS = 60_000

INLINE = ".jp-Notebook .calwatch-widget"
SIDEBAR = ".jupyterlab-sidecar .calwatch-widget"
#: Vega's SVG renderer: every data mark item is a child of a `g.role-mark` group.
MARKS = "svg g.role-mark > *"

# Runs code in the notebook's kernel through the page's own kernel connection.
KERNEL_EXEC_JS = """
async ([path, code, exprs]) => {
  const app = window.jupyterapp;
  let panel = null;
  for (const w of app.shell.widgets('main')) if (w.context && w.context.path === path) panel = w;
  if (panel === null) throw new Error('notebook panel not found: ' + path);
  const kernel = panel.sessionContext.session.kernel;
  const future = kernel.requestExecute({
    code, silent: false, store_history: false, user_expressions: exprs, allow_stdin: false,
  });
  const reply = await future.done;
  return reply.content;
}
"""

NOTEBOOK_STATE_JS = """
(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  for (const w of app.shell.widgets('main')) {
    if (!(w.context && w.context.path === path)) continue;
    const kernel = w.sessionContext.session?.kernel;
    const cells = w.content.widgets.filter((c) => c.model.type === 'code');
    const errors = [];
    for (const c of cells) {
      for (const o of c.model.outputs.toJSON()) {
        if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
      }
    }
    return {
      kernel: kernel ? kernel.status : null,
      counts: cells.map((c) => c.model.executionCount),
      errors,
    };
  }
  return null;
}
"""


class Kernel:
    """The notebook's kernel, reached through the page (as a cell would be)."""

    def __init__(self, page: Any, path: str) -> None:
        self.page = page
        self.path = path

    def run(self, code: str, **exprs: str) -> dict[str, Any]:
        content = self.page.evaluate(KERNEL_EXEC_JS, [self.path, code, exprs])
        assert content["status"] == "ok", f"{code!r} failed: {content}"
        out = {}
        for name, value in content.get("user_expressions", {}).items():
            assert value["status"] == "ok", f"{name}: {value}"
            out[name] = ast.literal_eval(value["data"]["text/plain"])
        return out

    def eval(self, expr: str) -> Any:
        return self.run("", v=expr)["v"]

    def wait_for(self, expr: str, expected: Any, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            value = self.eval(expr)
            if value == expected:
                return
            time.sleep(0.05)
        pytest.fail(f"kernel: {expr} = {value!r}, expected {expected!r} within {timeout_s} s")


def route_offline(page: Any) -> list[str]:
    """Cut the page off the network: ``file:``, ``blob:`` and ``data:`` load, anything else fails.

    Returns the list every requested URL is appended to (to assert nothing else was asked for).
    """
    asked: list[str] = []

    def offline(route: Any) -> None:
        asked.append(route.request.url)
        if route.request.url.startswith(("file:", "blob:", "data:")):
            route.continue_()
        else:
            route.abort("internetdisconnected")

    page.route("**/*", offline)
    return asked


def attr(page: Any, selector: str, name: str) -> str | None:
    return page.eval_on_selector(selector, f"(el) => el.getAttribute({json.dumps(name)})")


def count(page: Any, selector: str) -> int:
    return page.eval_on_selector_all(selector, "(els) => els.length")


def wait_attr(page: Any, selector: str, name: str, value: str | None = None) -> None:
    """Wait until ``selector`` exists with attribute ``name`` (equal to ``value`` if given)."""
    page.wait_for_function(
        "([sel, name, value]) => { const el = document.querySelector(sel);"
        " if (el === null || !el.hasAttribute(name)) return false;"
        " return value === null || el.getAttribute(name) === value; }",
        arg=[selector, name, value],
        timeout=TIMEOUT_MS,
    )


def wait_seq(page: Any, selector: str, seq: int) -> None:
    """Wait until the view has applied update ``seq`` (or a later one).

    At least, not exactly: the kernel may send one more update of the window panels when it
    goes idle, after the test read ``seq``.
    """
    page.wait_for_function(
        "([sel, seq]) => { const el = document.querySelector(sel);"
        " return el !== null && Number(el.getAttribute('data-applied-seq') ?? '-Infinity') >= seq; }",
        arg=[selector, seq],
        timeout=TIMEOUT_MS,
    )


def chart_report(page: Any, root: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        f"{root} div.calwatch-chart",
        """(els, marks) => els.map((el) => ({
            chart: el.dataset.chart,
            svg: el.querySelectorAll('svg').length,
            marks: el.querySelectorAll(marks).length,
            width: Math.round(el.getBoundingClientRect().width),
        }))""",
        MARKS,
    )


def assert_charts(page: Any, root: str, expected: list[str] = CHART_NAMES) -> list[dict[str, Any]]:
    report = chart_report(page, root)
    assert [c["chart"] for c in report] == expected, report
    for c in report:
        assert c["svg"] >= 1, f"{root}: chart {c['chart']} has no <svg>: {report}"
        assert c["marks"] > 0, f"{root}: chart {c['chart']} has no marks: {report}"
    return report


def no_widget_error(page: Any, root: str) -> None:
    texts = page.eval_on_selector_all(
        f"{root} .calwatch-error", "(els) => els.filter((e) => !e.hidden).map((e) => e.textContent)"
    )
    assert not texts, f"{root} shows an error: {texts}"


def browser_errors(page: Any) -> list[str]:
    """Console errors and uncaught page errors recorded by the ``page`` fixture."""
    return [m for m in page.console_messages_ if m.startswith(("[console.error]", "[pageerror]"))]


def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def notebook_state(page: Any, path: str) -> dict[str, Any] | None:
    """Kernel status, execution counts and error outputs of the open notebook ``path``."""
    try:
        return page.evaluate(NOTEBOOK_STATE_JS, path)
    except PlaywrightError:  # the page is still navigating (token redirect)
        return None


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code cells (not run yet) on the calwatch kernel, written to ``path``."""
    from .conftest import KERNEL_NAME

    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None}
            for s in cells
        ],
        "metadata": {
            "kernelspec": {
                "name": KERNEL_NAME,
                "display_name": "Python 3 (calwatch venv)",
                "language": "python",
            }
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))


def open_notebook(page: Any, lab_server: LabServer, path: str) -> Kernel:
    """Open ``path`` in JupyterLab, wait for its (venv) kernel to be idle, return the kernel."""
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(lab_server.lab_url(path))
    wait_until(
        lambda: (s := notebook_state(page, path)) is not None and s["kernel"] == "idle",
        "the notebook to open with an idle kernel",
    )
    kernel = Kernel(page, path)
    assert kernel.eval("__import__('sys').executable") == str(lab_server.kernel_python)
    lab_server.remember_children()
    return kernel


def run_all(page: Any, path: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run All, wait until the kernel is idle with every code cell executed; assert no cell raised."""
    page.evaluate("() => window.jupyterapp.commands.execute('runmenu:run-all')")
    state = wait_until(
        lambda: (
            (s := notebook_state(page, path)) is not None
            and s["kernel"] == "idle"
            and all(n is not None for n in s["counts"])
            and s
        ),
        "Run All to finish (kernel idle, every cell executed)",
        timeout_s=timeout_s,
    )
    assert not state["errors"], f"cells raised: {state['errors']}"
    return state
