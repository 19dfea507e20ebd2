"""The first screen of a report: what holds, what broke, and each warning as a card.

A report (or the page ``calwatch serve`` shows) is read by a team that did not watch the stream.
Its first screen answers two questions before any chart: *which promises hold* (one line per
calibrator, in the words and by the rule of the dashboard's health strip,
:func:`calwatch.views.health.health`) and *what broke, since when, on what evidence* (one line per
warning: its state, the batch it began, the stretch of batches and rows its evidence covers).
Below the dashboard each warning is a card: the one-line summary, the explanation and what to do,
with the statistical fine print (the false-alarm bound, the statistic against its threshold, the
acknowledgement) behind a "details" toggle instead of twelve table columns.

Every text that came from users (calibrator, batch and class names, notes) is escaped here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from calwatch.publish.escape import escape_html
from calwatch.views.shift_lanes import warning_line, warning_state

if TYPE_CHECKING:
    from calwatch.monitor.monitor import Monitor

#: The health strip's states, in the order the verdict counts them.
STATES = ("broken", "at risk", "holding", "waiting")


def _number(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _measured(row: Mapping[str, Any]) -> str:
    """What the chip's number is, in words: coverage (or error rate) with its band and its rows."""
    if row.get("value") is None or not row.get("n_labelled"):
        return "no labelled rows yet"
    what = "error rate" if row.get("kind") == "risk" else "coverage"
    return (
        f"{what} {_number(row['value'])} [{_number(row.get('lo'))}, {_number(row.get('hi'))}] "
        f"over the last {row.get('n_batches', 0):,} labelled batches ({row['n_labelled']:,} rows)"
    )


def _said(row: Mapping[str, Any]) -> str:
    """The measured band, then the strip's reason, without saying the band twice."""
    measured, reason = _measured(row), str(row.get("reason") or "")
    if reason and row.get("value") is not None and f"{_number(row['value'])} [" in reason:
        return reason  # the reason already gives the band (a verdict on coverage)
    return f"{measured} — {reason}" if reason else measured


def verdict(health_rows: Sequence[Mapping[str, Any]], warnings: Sequence[Mapping[str, Any]]) -> str:
    """One sentence: how many promises hold, are at risk or broken, and the warnings by state."""
    if not health_rows:
        return "No calibrators."
    counts = {state: sum(1 for r in health_rows if r.get("state") == state) for state in STATES}
    promises = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
    by_state = [warning_state(w) for w in warnings]
    opened, seen = by_state.count("open"), by_state.count("acknowledged")
    closed = by_state.count("closed")
    if not warnings:
        told = "no warnings"
    else:
        told = (
            f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''} "
            f"({opened} open, {seen} acknowledged, {closed} closed)"
        )
    return f"{len(health_rows)} promise{'s' if len(health_rows) != 1 else ''}: {promises}; {told}."


def headline_html(monitor: Monitor) -> str:
    """The report's first screen: the verdict, one line per promise, one line per warning (escaped HTML)."""
    from calwatch.widget.payloads import health_rows

    if monitor.calibration_ is None:
        return (
            '<section id="calwatch-verdict"><p class="verdict">Not calibrated yet: no promise '
            "is stated until <code>calibrate</code> runs.</p></section>"
        )
    rows = health_rows(monitor)
    warnings = monitor.warnings().to_dicts()
    parts = [f'<p class="verdict">{escape_html(verdict(rows, warnings))}</p>']
    if not monitor.n_batches:
        parts.append('<p class="empty">Waiting for the first batch: the promises above are stated.</p>')
    items = []
    for row in rows:
        state = str(row.get("state", "waiting"))
        items.append(
            f'<li class="chip-line" data-state="{escape_html(state)}">'
            f'<span class="state state-{escape_html(state.replace(" ", "-"))}">{escape_html(state)}</span> '
            f"<b>{escape_html(row['calibrator'])}</b> · {escape_html(row.get('promise', ''))} · "
            f"{escape_html(_said(row))}</li>"
        )
    parts.append(f'<ul class="promises">{"".join(items)}</ul>')
    if warnings:
        lines = "".join(
            f'<li data-state="{warning_state(w)}">{escape_html(warning_line(monitor, w))}</li>'
            for w in sorted(warnings, key=lambda w: (warning_state(w) == "closed", -int(w["first_batch"])))
        )
        parts.append(f'<ul class="warning-lines">{lines}</ul>')
    return '<section id="calwatch-verdict">' + "\n".join(parts) + "</section>"


def warning_cards(monitor: Monitor) -> str:
    """Every warning as an expandable card: summary line, explanation, action; fine print in details."""
    warnings = monitor.warnings().to_dicts()
    if not warnings:
        return '<p class="empty">No shift warnings.</p>'
    cards = []
    for w in warnings:
        state = warning_state(w)
        fine = [
            ("false-alarm control", w.get("false_alarm_control")),
            (
                "statistic",
                f"log10 {_number(w.get('statistic'))} (alarm at log10 {_number(w.get('threshold'))})",
            ),
            ("rows", f"{w.get('first_row')}–{w.get('last_row')}"),
        ]
        if w.get("acknowledged"):
            fine += [
                ("acknowledged by", w.get("ack_by")),
                ("at", w.get("ack_at")),
                ("note", w.get("ack_note")),
            ]
        details = "".join(
            f"<dt>{escape_html(k)}</dt><dd>{escape_html(v)}</dd>" for k, v in fine if v not in (None, "")
        )
        cards.append(
            f'<details class="warning-card" data-state="{state}" data-episode="{int(w["episode"])}"'
            f"{' open' if state == 'open' else ''}>"
            f"<summary>{escape_html(warning_line(monitor, w))}</summary>"
            f"<p>{escape_html(w.get('explanation', ''))}</p>"
            f"<p><b>What to do:</b> {escape_html(w.get('action', ''))}</p>"
            f'<details class="fine-print"><summary>details</summary><dl>{details}</dl></details>'
            "</details>"
        )
    return "\n".join(cards)


__all__ = ["STATES", "headline_html", "verdict", "warning_cards"]
