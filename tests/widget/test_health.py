"""The health strip's rule (calwatch.views.health.health): every branch by hand, against a real monitor's
summary() and warnings(), and the live widget's incremental rows."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from scipy.stats import beta

from calwatch.engine.metrics.intervals import clopper_pearson
from calwatch.engine.shift.betting import calibration_null_rate
from calwatch.views import health
from calwatch.widget import health_rows, view_datasets

from ..health_scenario import REGION_STATES, health_monitor, regions_monitor
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


def test_coverage_rule_by_hand() -> None:
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
    # ... and at risk when the floor allows it (a small calibration set's slack): never holding
    assert _state([_sets(b, 100, 80) for b in range(5)], floors={"lac": 0.75}) == "at risk"
    # the pool is fine (455 / 500), the latest labelled batch alone is not (70 / 100): at risk
    rows = [_sets(b, 100, 96) for b in range(4)] + [_sets(4, 100, 70), _sets(5, 0, 0)]
    chip = health.health(rows, [])[0]
    assert chip["state"] == "at risk" and chip["reason"].startswith("batch 4: coverage 0.700")
    assert chip["spark"][-1] == [5, None, 0.9]  # the unlabelled batch: a gap in the sparkline
    # no labels in the last batches: waiting; no rows at all: waiting
    assert _state([_sets(b, 0, 0) for b in range(3)]) == "waiting"
    assert health.health([], [], calibrators=["lac"])[0]["state"] == "waiting"


def _cp(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson by scipy.stats.beta.ppf: independent of the betaincinv path under test."""
    tail = (1 - confidence) / 2
    return float(beta.ppf(tail, k, n - k + 1)), float(beta.ppf(1 - tail, k + 1, n - k))


#: Relative precision at which band ends from two computations of the same Beta quantile agree.
_QUANTILE_REL = 1e-9


def test_coverage_regions_by_hand() -> None:
    """Target 0.9, floor 0.85, 5 pooled batches of 100: the band's upper end decides the region."""
    floors = {"lac": 0.85}

    def chip(covered: int) -> dict[str, Any]:
        return health.health([_sets(b, 100, covered // 5) for b in range(5)], [], floors=floors)[0]

    # 448 / 500 = 0.896, band [0.866, 0.921]: reaches 0.9 although the value is under it
    rows = [_sets(b, 100, 90) for b in range(4)] + [_sets(4, 100, 88)]  # 448 / 500
    held = health.health(rows, [], floors=floors)[0]
    assert held["state"] == "holding" and held["hi"] == pytest.approx(_cp(448, 500)[1], rel=_QUANTILE_REL)
    assert held["reason"] == (
        "coverage 0.896 [0.866, 0.921] reaches 90% over the last 5 labelled batches (500 rows)"
    )
    # 430 / 500 = 0.86, band [0.826, 0.889]: wholly under 0.9, over the floor 0.85: at risk, amber
    at_risk = chip(430)
    assert at_risk["hi"] == pytest.approx(_cp(430, 500)[1], rel=_QUANTILE_REL)
    assert (at_risk["state"], at_risk["reference"]) == ("at risk", 0.85)
    assert at_risk["reason"] == (
        "coverage 0.860 [0.826, 0.889], below 90%, within calibration slack (floor 0.850)"
        " over the last 5 labelled batches (500 rows)"
    )
    # 400 / 500 = 0.8, band [0.762, 0.834]: under the floor: broken
    broken = chip(400)
    assert broken["state"] == "broken" and broken["hi"] == pytest.approx(_cp(400, 500)[1], rel=_QUANTILE_REL)
    assert broken["reason"].startswith("coverage 0.800 [0.762, 0.834], below 0.850 (90% less its calibration")
    # no slack (no floor given, or a PAC floor equal to the target): under the target is broken
    assert _state([_sets(b, 100, 86) for b in range(5)]) == "broken"
    assert _state([_sets(b, 100, 86) for b in range(5)], floors={"lac": 0.9}) == "broken"


def test_region_edges_at_float64_precision() -> None:
    """A band's end equal to the target (or floor) up to a few ulps reaches it; 1e-9 short does not."""
    rows = [_sets(b, 100, 86) for b in range(5)]  # 430 / 500
    hi = health.health(rows, [])[0]["hi"]
    at = [r | {"target": hi} for r in rows]
    assert _state(at, floors={"lac": 0.5}) == "holding"
    one_ulp = [r | {"target": float(np.nextafter(hi, 2.0))} for r in rows]
    assert _state(one_ulp, floors={"lac": 0.5}) == "holding"  # within TOLERANCE: rounding, not data
    assert _state([r | {"target": hi + 1e-9} for r in rows], floors={"lac": 0.5}) == "at risk"
    assert _state(rows, floors={"lac": hi}) == "at risk"
    assert _state(rows, floors={"lac": hi + 1e-9}) == "broken"
    assert [health.coverage_state(x, 0.9, 0.85) for x in (0.9, 0.8999999, 0.85, 0.8499999)] == [
        "holding",
        "at risk",
        "at risk",
        "broken",
    ]


def _classes(batches: int, per_batch: dict[str, tuple[int, int]], cal: str = "lac") -> list[dict[str, Any]]:
    """``class_coverage`` rows: each batch, each class ``(n_covered, n_labelled)``."""
    return [
        {"batch": b, "calibrator": cal, "class": name, "n_covered": k, "n_labelled": n}
        for b in range(batches)
        for name, (k, n) in per_batch.items()
    ]


def _per_class_chip(late: int, *, per_class: bool = True, rare: int = 5) -> dict[str, Any]:
    """5 batches: "on time" 57 / 60, "late" ``late`` / 30, "rare" 0 / ``rare``; floor 0.82."""
    per_batch = {"on time": (57, 60), "late": (late, 30), "rare": (0, rare)}
    rows = [_sets(b, 90 + rare, 57 + late) for b in range(5)]
    (chip,) = health.health(
        rows,
        [],
        floors={"lac": 0.82},
        classes=_classes(5, per_batch),
        per_class=["lac"] if per_class else (),
        qualifiers={"lac": "per class"},
    )
    return chip


def test_per_class_regions_by_hand() -> None:
    """Judged on the worst class among those with ≥ 30 labelled rows, bands at 1 − 0.05/K, named."""
    assert health.MIN_CLASS_ROWS == 30
    # "rare" has 25 labelled rows (< 30): not judged, so K = 2 and the bands are at 97.5%
    # "late" 135 / 150 = 0.9, [0.831, 0.948] at 97.5%; "on time" 285 / 300, [0.914, 0.974]
    held = _per_class_chip(27)
    assert (held["state"], held["worst_class"], held["n_classes"]) == ("holding", "late", 2)
    assert held["class_confidence"] == pytest.approx(0.975, rel=1e-15)
    assert (held["class_lo"], held["class_hi"]) == pytest.approx(_cp(135, 150, 0.975), rel=_QUANTILE_REL)
    assert held["reason"].startswith("class 'late': 0.900 [0.831, 0.948] reaches 90%; worst of 2 classes")
    assert held["promise"] == "90% coverage (per class)"
    # "late" 120 / 150 = 0.8, [0.716, 0.868]: under 0.9, over 0.82: at risk, the class named
    at_risk = _per_class_chip(24)
    assert (at_risk["state"], at_risk["worst_class"]) == ("at risk", "late")
    assert at_risk["reason"] == (
        "class 'late': 0.800 [0.716, 0.868], below 90%, within calibration slack (floor 0.820);"
        " worst of 2 classes with ≥ 30 labelled rows, 97.5% bands (Bonferroni)"
        " over the last 5 labelled batches (475 rows)"
    )
    # "late" 100 / 150 = 0.667, [0.574, 0.751]: under 0.82: broken, although the marginal band
    # (385 / 475 = 0.811, [0.772, 0.845]) is only at risk
    broken = _per_class_chip(20)
    assert broken["hi"] == pytest.approx(_cp(385, 475)[1], rel=_QUANTILE_REL) and broken["hi"] > 0.82
    assert (broken["state"], broken["class_value"]) == ("broken", pytest.approx(100 / 150, rel=1e-15))
    assert broken["reason"].startswith("class 'late': 0.667 [0.574, 0.751], below 0.820 (90% less its")


def test_per_class_only_for_per_class_promises_and_enough_rows() -> None:
    # the same counts for a marginal promise: the marginal band alone (at risk), no class named
    marginal = _per_class_chip(20, per_class=False)
    assert (marginal["state"], marginal["worst_class"]) == ("at risk", None)
    assert marginal["reason"].startswith("coverage 0.811 [0.772, 0.845], below 90%, within")
    # "rare" at 30 labelled rows (6 a batch) is judged: 0 / 30 is the worst class, K = 3
    rare = _per_class_chip(27, rare=6)
    assert (rare["state"], rare["worst_class"], rare["n_classes"]) == ("broken", "rare", 3)
    assert rare["class_confidence"] == pytest.approx(1 - 0.05 / 3, rel=1e-15)
    # no covered row: the upper end solves (1 − p)^30 = 0.05 / 6 (the band's upper tail)
    assert rare["class_hi"] == pytest.approx(1 - (0.05 / 6) ** (1 / 30), rel=_QUANTILE_REL)
    # no class with 30 rows yet: the marginal band decides, and the chip says why
    rows = [_sets(b, 10, 9) for b in range(5)]  # 45 / 50 in all, 25 rows per class
    (chip,) = health.health(
        rows, [], classes=_classes(5, {"a": (5, 5), "b": (4, 5)}), per_class=["lac"], floors={"lac": 0.8}
    )
    assert chip["worst_class"] is None and chip["state"] == "holding"
    assert chip["reason"].endswith("; no class has 30 labelled rows yet")


def test_per_class_takes_the_worse_of_marginal_and_class() -> None:
    """Marginal 850 / 1000, [0.826, 0.872] under the floor 0.875; each class 425 / 500 at 97.5%,
    [0.811, 0.884], over it: the marginal verdict (broken) is the worse one and is the reason."""
    rows = [_sets(b, 200, 170) for b in range(5)]
    (chip,) = health.health(
        rows,
        [],
        classes=_classes(5, {"a": (85, 100), "b": (85, 100)}),
        per_class=["lac"],
        floors={"lac": 0.875},
    )
    assert chip["class_hi"] == pytest.approx(_cp(425, 500, 0.975)[1], rel=_QUANTILE_REL)
    assert chip["class_hi"] > 0.875 > chip["hi"]
    assert chip["state"] == "broken" and chip["reason"].startswith(
        "coverage 0.850 [0.826, 0.872], below 0.875"
    )
    # ties in the upper end: the lower coverage, then the name
    worst = health.worst_class({"b": (85, 100), "a": (85, 100)})
    assert worst is not None and worst.name == "a"
    assert health.worst_class({"a": (1, 10)}) is None
    with pytest.raises(ValueError, match="min_rows"):
        health.worst_class({"a": (1, 10)}, min_rows=0)


def test_warnings_rule_by_hand() -> None:
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
    (chip,) = health.health(
        [_sets(b, 100, 70) for b in range(5)], [_warning("lac: conformity martingale", episode=4)]
    )
    assert (chip["state"], chip["episodes"]) == ("broken", [4])


def test_risk_and_other_kinds_by_hand() -> None:
    # observed 0.40 on 500 rows ([0.357, 0.444]) vs an estimate of 0.30: broken
    assert _state([_risk(b, 100, 0.40, 0.30) for b in range(5)]) == "broken"
    chip = health.health([_risk(b, 100, 0.28, 0.30) for b in range(5)], [], qualifiers={"risk": "top-1"})[0]
    assert (chip["state"], chip["promise"], chip["reference"]) == (
        "holding",
        "risk ≤ 0.300 (top-1, last 5 batches)",
        0.30,
    )
    assert _state([_risk(b, 0, None, 0.30) for b in range(5)]) == "waiting"
    # an upper estimate breaks one way only; an estimate of the error itself both ways
    low = [_risk(b, 100, 0.10, 0.30) for b in range(5)]
    assert _state([r | {"estimate_promise": "upper estimate (conservative)"} for r in low]) == "holding"
    chip = health.health([r | {"estimate_promise": "calibrated estimate"} for r in low], [])[0]
    assert (chip["state"], chip["promise"]) == ("broken", "risk ≈ 0.300 (last 5 batches)")
    assert "error 0.100 [0.075, 0.130] below its estimate 0.300" in chip["reason"]
    # a kind that states no number: the warnings alone
    selective = [{"batch": 0, "calibrator": "sel", "kind": "selective", "n_rows": 10, "n_labelled": 5}]
    assert _state(selective) == "holding"
    assert _state(selective, [_warning("sel: something")]) == "at risk"


def test_only_the_last_batches_count_and_order() -> None:
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


def test_named_calibrator_prefers_the_longest_name() -> None:
    assert health.named_calibrator("lac-2: coverage drop", ["lac", "lac-2"]) == "lac-2"
    assert health.named_calibrator("lac: coverage drop", ["lac", "lac-2"]) == "lac"
    assert health.named_calibrator("confidence martingale", ["lac"]) is None


def test_against_summary_and_warnings_of_a_real_monitor() -> None:
    mon = health_monitor()
    floors = health.floors(mon)
    assert floors["lac"] == pytest.approx(1 - calibration_null_rate(0.1, 10_000, 0.01))
    chips = {c["key"]: c for c in health.health(mon.summary(), mon.warnings(), floors=floors)}
    assert {k: c["state"] for k, c in chips.items()} == {"lac": "holding", "softmax-risk": "broken"}
    # recomputed from summary() independently: the 5 most recent labelled batches (2..6)
    s = mon.summary().to_dicts()
    lac = [r for r in s if r["calibrator"] == "lac" and r["n_labelled"] > 0][-5:]
    k, n = sum(r["n_covered"] for r in lac), sum(r["n_labelled"] for r in lac)
    assert [r["batch"] for r in lac] == [2, 3, 4, 5, 6] and chips["lac"]["n_labelled"] == n
    assert chips["lac"]["value"] == pytest.approx(k / n)
    lo, hi = clopper_pearson([k], [n])
    assert chips["lac"]["hi"] == pytest.approx(hi[0]) and hi[0] >= 0.9  # holding: the band reaches 90%
    risk = [r for r in s if r["calibrator"] == "softmax-risk" and r["n_labelled"] > 0][-5:]
    errors = sum(round(r["observed_error"] * r["n_labelled"]) for r in risk)
    est = sum(r["estimated_error_labelled"] * r["n_labelled"] for r in risk) / n
    lo, _ = clopper_pearson([errors], [n])
    assert lo[0] > est and chips["softmax-risk"]["reference"] == pytest.approx(est)
    assert mon.warnings().height == 0  # the states come from the bands alone here
    # the report's dataset is the same rule on the same summary
    report = view_datasets(mon, dashboard_data=True)["health"]
    assert [(r["key"], r["state"]) for r in report] == [("lac", "holding"), ("softmax-risk", "broken")]
    assert re.fullmatch(r"risk [≤≈] 0\.\d{3} \(top-1, last \d+ batch(es)?\)", report[1]["promise"]), report[
        1
    ]["promise"]


def test_pets_states_follow_its_warnings() -> None:
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


def test_widget_sends_health_incrementally() -> None:
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


def test_regions_scenario_sits_in_each_region() -> None:
    """tests/health_scenario.py's REGIONS monitor: one chip per region, its numbers recomputed."""
    mon = regions_monitor()
    floors = health.floors(mon)
    for key, n in (("lac", 400), ("class", 100)):  # 400 calibration rows; 100 in the smallest class
        for alpha in (0.2, 0.1, 0.05):
            expected = 1 - calibration_null_rate(alpha, n, 0.01)
            assert floors[f"{key}-{round(100 * (1 - alpha))}"] == pytest.approx(expected, rel=1e-12)
    chips = {c["key"]: c for c in health_rows(mon)}
    assert {k: (c["state"], c["worst_class"]) for k, c in chips.items()} == REGION_STATES
    # the pooled batches 1-5, from class_coverage() independently of health()
    pooled = mon.class_coverage(tuple(range(1, 6)), by_batch=False)
    late = pooled.filter((pooled["calibrator"] == "class-90") & (pooled["class"] == "late")).to_dicts()
    assert [(r["n_covered"], r["n_labelled"]) for r in late] == [(300, 375)]
    class_hi = _cp(300, 375, 1 - 0.05 / 4)[1]
    marginal_hi = _cp(1320, 1500)[1]
    for key, chip in chips.items():
        target = chip["target"]
        assert chip["hi"] == pytest.approx(marginal_hi, rel=_QUANTILE_REL)
        hi = class_hi if key.startswith("class") else marginal_hi
        region = "holding" if hi >= target else "at risk" if hi >= floors[key] else "broken"
        assert region == chip["state"], (key, hi, target, floors[key])
        if key.startswith("class"):
            assert chip["class_hi"] == pytest.approx(class_hi, rel=_QUANTILE_REL) and chip["n_classes"] == 4
            assert chip["reason"].startswith("class 'late': 0.800 [0.744, 0.849]"), chip["reason"]
            assert chip["promise"].endswith("coverage (per class)")
    assert "below 90%, within calibration slack" in chips["lac-90"]["reason"]
    # the report's and the static output's dataset: the same rule on the same counts
    report = view_datasets(mon, dashboard_data=True)["health"]
    assert [(r["key"], r["state"], r["worst_class"]) for r in report] == [
        (k, *v) for k, v in REGION_STATES.items()
    ]


def _all_covered(n_per_class: int) -> tuple[np.ndarray, list[str]]:
    """Rows of the regions scenario's model whose label is always the top class (all covered)."""
    classes = ["on time", "late", "early", "cancelled"]
    label = np.repeat(np.arange(4), n_per_class)
    P = np.full((len(label), 4), 0.1 / 3)
    P[np.arange(len(label)), label] = 0.9
    return P, [classes[i] for i in label]


def test_widget_follows_per_class_chips() -> None:
    """The live widget's per-class chips equal health_rows() after every call, and recover."""
    mon = regions_monitor()
    widget = mon.widget()
    assert list(widget.sent_rows["health"].values()) == health_rows(mon)
    for b in range(6, 11):
        P, y = _all_covered(40)
        ids = [f"c{b}-{i}" for i in range(len(y))]
        mon.observe(probs=P, ids=ids)
        assert list(widget.sent_rows["health"].values()) == health_rows(mon)
        mon.label(ids, y)
        assert list(widget.sent_rows["health"].values()) == health_rows(mon)
    # five fully covered batches pooled: every class 200 / 200, every promise holds
    chips = health_rows(mon)
    assert {c["key"]: c["state"] for c in chips} == dict.fromkeys(REGION_STATES, "holding")
    assert [c["class_n_labelled"] for c in chips if c["key"].startswith("class")] == [200, 200, 200]


def test_a_calibrated_monitor_states_its_promises_before_the_first_batch() -> None:
    # Before the first batch the chips said "no stated promise" while the cards said 1−α=0.9.
    stated = {"lac": {"kind": "sets", "target": 0.9}, "risk": {"kind": "risk", "target": None}}
    chips = health.health([], [], calibrators=["lac", "risk"], qualifiers={"risk": "top-1"}, stated=stated)
    assert [(c["state"], c["promise"], c["reason"]) for c in chips] == [
        ("waiting", "90% coverage", "no batches yet"),
        ("waiting", "risk ≤ estimate (top-1)", "no batches yet"),
    ]
    assert [c["promise"] for c in health.health([], [], calibrators=["lac"])] == ["no stated promise"]
