"""The health strip's rule (calwatch.health.health): every branch by hand, against a real monitor's
summary() and warnings(), and the live widget's incremental rows."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from calwatch import health
from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import calibration_null_rate
from calwatch.widget import health_rows, view_datasets

from ..health_scenario import health_monitor
from ..synthetic import pets_monitor


def _sets(
    batch: int, n_labelled: int, n_covered: int, *, cal: str = "lac", target: float = 0.9
) -> dict[str, Any]:
    return {
        "batch": batch, "calibrator": cal, "kind": "sets", "target": target, "n_rows": 100,
        "n_labelled": n_labelled, "n_covered": n_covered,
    }  # fmt: skip


def _risk(
    batch: int, n_labelled: int, observed: float | None, est: float, cal: str = "risk"
) -> dict[str, Any]:
    return {
        "batch": batch, "calibrator": cal, "kind": "risk", "target": None, "n_rows": 100,
        "n_labelled": n_labelled, "observed_error": observed, "estimated_error": est,
        "estimated_error_labelled": est if n_labelled else None,
    }  # fmt: skip


def _warning(name: str, *, open_: bool = True, episode: int = 0, first_batch: int = 3) -> dict[str, Any]:
    return {
        "episode": episode,
        "name": name,
        "open": open_,
        "first_batch": first_batch,
        "acknowledged": False,
    }


def _state(rows: list[dict[str, Any]], warnings: list[dict[str, Any]] = (), **kw: Any) -> str:  # type: ignore[assignment]
    (chip,) = health.health(rows, list(warnings), **kw)
    return str(chip["state"])


def test_coverage_rule_by_hand():
    holding = [_sets(b, 100, 90) for b in range(6)]
    chip = health.health(holding, [])[0]
    # the last 5 labelled batches pooled: 450 / 500, with its Clopper-Pearson band
    lo, hi = clopper_pearson([450], [500])
    assert (chip["state"], chip["n_batches"], chip["n_labelled"], chip["first_batch"]) == (
        "holding",
        5,
        500,
        1,
    )
    assert chip["value"] == 0.9 and chip["lo"] == pytest.approx(lo[0]) and chip["hi"] == pytest.approx(hi[0])
    assert chip["promise"] == "90% coverage" and chip["spark"][0] == [0, 0.9, 0.9]
    # pooled 400 / 500 = 0.8: the band [0.762, 0.834] lies under 0.9: broken
    assert _state([_sets(b, 100, 80) for b in range(5)]) == "broken"
    # ... unless the floor allows it (a small calibration set's slack)
    assert _state([_sets(b, 100, 80) for b in range(5)], floors={"lac": 0.75}) == "holding"
    # the pool is fine (455 / 500), the latest labelled batch alone is not (70 / 100): at risk
    rows = [_sets(b, 100, 96) for b in range(4)] + [_sets(4, 100, 70), _sets(5, 0, 0)]
    chip = health.health(rows, [])[0]
    assert chip["state"] == "at risk" and chip["reason"].startswith("batch 4: coverage 0.700")
    assert chip["spark"][-1] == [5, None, 0.9]  # the unlabelled batch: a gap in the sparkline
    # no labels in the last batches: waiting; no rows at all: waiting
    assert _state([_sets(b, 0, 0) for b in range(3)]) == "waiting"
    assert health.health([], [], calibrators=["lac"])[0]["state"] == "waiting"


def test_warnings_rule_by_hand():
    rows = [_sets(b, 100, 91) for b in range(5)]
    # a coverage-drop test names it: broken, acknowledged or not; closed episodes do not count
    assert _state(rows, [_warning("lac: coverage drop")]) == "broken"
    assert _state(rows, [_warning("lac: class coverage drop") | {"acknowledged": True}]) == "broken"
    assert _state(rows, [_warning("lac: coverage drop", open_=False)]) == "holding"
    # its conformity martingale: at risk; another calibrator's warning: nothing; the model's: at risk
    assert _state(rows, [_warning("lac: conformity martingale")]) == "at risk"
    two = health.health(
        [*rows, *(r | {"calibrator": "lac-2"} for r in rows)], [_warning("lac-2: coverage drop")]
    )
    assert [(c["key"], c["state"]) for c in two] == [("lac", "holding"), ("lac-2", "broken")]
    chip = health.health(rows, [_warning("confidence martingale", episode=7, first_batch=2)])[0]
    assert chip["state"] == "at risk"
    assert chip["reason"] == "open warning on the model: confidence martingale since batch 2"
    # a band below the floor outranks a milder warning; the episodes naming it are listed
    chip = health.health(
        [_sets(b, 100, 70) for b in range(5)], [_warning("lac: conformity martingale", episode=4)]
    )
    assert (chip[0]["state"], chip[0]["episodes"]) == ("broken", [4])


def test_risk_and_other_kinds_by_hand():
    # observed 0.40 on 500 rows ([0.357, 0.444]) vs an estimate of 0.30: broken
    assert _state([_risk(b, 100, 0.40, 0.30) for b in range(5)]) == "broken"
    chip = health.health([_risk(b, 100, 0.28, 0.30) for b in range(5)], [], qualifiers={"risk": "top-1"})[0]
    assert (chip["state"], chip["promise"], chip["reference"]) == ("holding", "risk ≤ 0.300 (top-1)", 0.30)
    assert _state([_risk(b, 0, None, 0.30) for b in range(5)]) == "waiting"
    # an upper estimate breaks one way only; an estimate of the error itself both ways
    low = [_risk(b, 100, 0.10, 0.30) for b in range(5)]
    assert _state([r | {"estimate_promise": "upper estimate (conservative)"} for r in low]) == "holding"
    chip = health.health([r | {"estimate_promise": "calibrated estimate"} for r in low], [])[0]
    assert (chip["state"], chip["promise"]) == ("broken", "risk ≈ 0.300")
    assert "error 0.100 [0.075, 0.130] below its estimate 0.300" in chip["reason"]
    # a kind that states no number: the warnings alone
    selective = [{"batch": 0, "calibrator": "sel", "kind": "selective", "n_rows": 10, "n_labelled": 5}]
    assert _state(selective) == "holding"
    assert _state(selective, [_warning("sel: something")]) == "at risk"


def test_only_the_last_batches_count_and_order():
    old_bad = [_sets(b, 100, 50) for b in range(30)]
    unlabelled = [_sets(b, 0, 0) for b in range(30, 40)]
    chip = health.health(old_bad + unlabelled, [], spark=10)[0]
    assert chip["state"] == "waiting" and [p[0] for p in chip["spark"]] == list(range(30, 40))
    assert _state([*old_bad, *unlabelled], spark=15) == "broken"  # labelled batches 25-29 come in
    rows = [_sets(0, 10, 9, cal="b"), _sets(0, 10, 9, cal="a")]
    assert [c["key"] for c in health.health(rows, [])] == ["b", "a"]
    assert [c["key"] for c in health.health(rows, [], calibrators=["a", "b"])] == ["a", "b"]
    with pytest.raises(ValueError, match="recent and spark"):
        health.health(rows, [], recent=0)


def test_named_calibrator_prefers_the_longest_name():
    assert health.named_calibrator("lac-2: coverage drop", ["lac", "lac-2"]) == "lac-2"
    assert health.named_calibrator("lac: coverage drop", ["lac", "lac-2"]) == "lac"
    assert health.named_calibrator("confidence martingale", ["lac"]) is None


def test_against_summary_and_warnings_of_a_real_monitor():
    mon = health_monitor()
    floors = health.floors(mon)
    assert floors["lac"] == pytest.approx(1 - calibration_null_rate(0.1, 2000, 0.01))
    chips = {c["key"]: c for c in health.health(mon.summary(), mon.warnings(), floors=floors)}
    assert {k: c["state"] for k, c in chips.items()} == {"lac": "holding", "softmax-risk": "broken"}
    # recomputed from summary() independently: the 5 most recent labelled batches (2..6)
    s = mon.summary().to_dicts()
    lac = [r for r in s if r["calibrator"] == "lac" and r["n_labelled"] > 0][-5:]
    k, n = sum(r["n_covered"] for r in lac), sum(r["n_labelled"] for r in lac)
    assert [r["batch"] for r in lac] == [2, 3, 4, 5, 6] and chips["lac"]["n_labelled"] == n
    assert chips["lac"]["value"] == pytest.approx(k / n)
    lo, hi = clopper_pearson([k], [n])
    assert chips["lac"]["hi"] == pytest.approx(hi[0]) and hi[0] >= floors["lac"]
    risk = [r for r in s if r["calibrator"] == "softmax-risk" and r["n_labelled"] > 0][-5:]
    errors = sum(round(r["observed_error"] * r["n_labelled"]) for r in risk)
    est = sum(r["estimated_error_labelled"] * r["n_labelled"] for r in risk) / n
    lo, _ = clopper_pearson([errors], [n])
    assert lo[0] > est and chips["softmax-risk"]["reference"] == pytest.approx(est)
    assert mon.warnings().height == 0  # the states come from the bands alone here
    # the report's dataset is the same rule on the same summary
    report = view_datasets(mon, dashboard_data=True)["health"]
    assert [(r["key"], r["state"]) for r in report] == [("lac", "holding"), ("softmax-risk", "broken")]
    assert re.fullmatch(r"risk [≤≈] 0\.\d{3} \(top-1\)", report[1]["promise"]), report[1]["promise"]


def test_pets_states_follow_its_warnings():
    """Every calibrator named by an open warning of pets_monitor is at risk or broken, as the rule says."""
    mon = pets_monitor()
    warnings = mon.warnings().to_dicts()
    chips = {c["key"]: c for c in health_rows(mon)}
    assert set(chips) == set(mon.calibrators)
    model_wide = any(
        w["open"] and health.named_calibrator(w["name"], mon.calibrators) is None for w in warnings
    )
    for key, chip in chips.items():
        named = [
            w for w in warnings if w["open"] and health.named_calibrator(w["name"], mon.calibrators) == key
        ]
        assert chip["episodes"] == [w["episode"] for w in named]
        if any("coverage drop" in w["name"] for w in named):
            assert chip["state"] == "broken", (key, chip)
        elif named or model_wide:
            assert chip["state"] in ("at risk", "broken"), (key, chip)


def test_widget_sends_health_incrementally():
    """After every call the widget's health rows equal the rule on summary(); only changed rows travel."""
    mon = health_monitor()
    widget = mon.widget()
    sent: list[dict[str, Any]] = []
    widget.send = lambda message, buffers=None: sent.append(message)  # type: ignore[method-assign]
    assert list(widget.sent_rows["health"].values()) == health_rows(mon)
    rng = np.random.default_rng(5)
    for b in range(8, 12):
        P = rng.dirichlet(np.ones(4), size=50)
        ids = [f"{b}-{i}" for i in range(50)]
        mon.observe(probs=P, ids=ids)
        assert list(widget.sent_rows["health"].values()) == health_rows(mon)
        mon.label(ids, list(rng.choice(["cat", "dog", "owl"], size=50)))
        assert list(widget.sent_rows["health"].values()) == health_rows(mon)
    upserts = [m for m in sent if m.get("kind") == "upsert"]
    assert upserts and all(len(m["data"].get("health", [])) <= 2 for m in upserts)
    # a note changes no chip: no health row travels
    sent.clear()
    mon.note("looked at the strip")
    assert sent and all("health" not in m["data"] for m in sent if m.get("kind") == "upsert")
    assert widget.replay_payload()["health"] == health_rows(mon)
