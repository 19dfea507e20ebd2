"""Snapshots edited and re-signed: impossible numbers are refused on load, naming file and field.

Each test saves a real monitor, rewrites one value in a stored file, recomputes that file's size
and SHA-256 in ``manifest.json`` exactly as :func:`calwatch.snapshot.store.save_monitor` writes them (so
the checksums pass), and expects :class:`~calwatch.core.codec.SnapshotError` naming the file,
the batch or calibrator, and the field.
"""

import json
import math
import shutil

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.core.codec import SnapshotError
from calwatch.kinds.admit import AdmitKind, AdmitRows
from calwatch.kinds.regression import RegressionBatchStats
from calwatch.kinds.risk import RiskBatchStats
from calwatch.kinds.selective import SelectiveBatchStats
from calwatch.kinds.sets import CalibratorBatchStats
from calwatch.snapshot.checks import calibrator_problems

from ..synthetic import pets_monitor, softmax_data
from .snapshot_files import resign

FAST = {"epochs": 1, "steps_per_epoch": 3, "sample_size": 64, "progress": False, "n_threads": 1}


# ---------------------------------------------------------------------------- monitors of every kind
def _admit_monitor():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 4

    def draw(n, spread=1.0):
        y = rng.integers(0, 3, n)
        E = (centres[y] + spread * rng.normal(size=(n, 8))).astype(np.float32)
        return E, E @ centres.T / 8, y

    reference, (E_ca, L_ca, y_ca) = draw(300), draw(400)
    mon = cw.Monitor(
        calibrators={"va": cw.VennAdmit(alpha=0.1, kappa=5, epochs=2, progress=False)}, shift=None
    )
    mon.calibrate(logits=L_ca, embeddings=E_ca, y=y_ca, reference=reference)
    for b in range(3):
        E, L, y = draw(100, spread=1.0 if b < 2 else 2.5)
        mon.observe(logits=L, embeddings=E, ids=[f"{b}-{i}" for i in range(100)])
        mon.label([f"{b}-{i}" for i in range(80)], y[:80])
    return mon


def _selective_monitor():
    P, y = softmax_data(1500, K=3, seed=0)
    mon = cw.Monitor(calibrators={"sel": cw.SelectiveCalibrator(coverage=0.7, seed=0, **FAST)}, shift=None)
    mon.calibrate(probs=P, y=y)
    for b in range(3):
        P_b, y_b = softmax_data(200, K=3, seed=10 + b)
        mon.observe(probs=P_b, ids=[f"{b}-{i}" for i in range(200)])
        mon.label([f"{b}-{i}" for i in range(150)], y_b[:150])
    return mon


def _regression_monitor():
    rng = np.random.default_rng(0)
    x = rng.normal(size=500)
    y = 2 * x + rng.normal(size=500)
    mon = cw.Monitor(
        task="regression", calibrators={"mcc": cw.ModularConformalCalibrator(prediction="point")}
    )
    mon.calibrate(pred=2 * x[:200], y=y[:200])
    for b in range(3):
        rows = slice(200 + 100 * b, 300 + 100 * b)
        mon.observe(pred=2 * x[rows], ids=[f"{b}-{i}" for i in range(100)])
        mon.label([f"{b}-{i}" for i in range(60)], y[rows][:60])
    return mon


BUILDERS = {
    "pets": pets_monitor,  # split conformal (plain, randomized, by class), ACI, risk, PAC
    "admit": _admit_monitor,
    "selective": _selective_monitor,
    "regression": _regression_monitor,
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each kind's monitor and its untouched snapshot folder."""
    root = tmp_path_factory.mktemp("snapshots")
    out = {}
    for kind, build in BUILDERS.items():
        mon = build()
        mon.save(root / kind)
        out[kind] = (mon, root / kind)
    return out


@pytest.fixture
def snapshot(saved, tmp_path):
    """A fresh copy of one kind's snapshot, to tamper with."""

    def copy(kind):
        target = tmp_path / kind
        shutil.copytree(saved[kind][1], target)
        return target

    return copy


# ---------------------------------------------------------------------------- tampering, re-signed


def _edit_state(snap, edit):
    state = json.loads((snap / "state.json").read_text())
    edit(state)
    (snap / "state.json").write_text(json.dumps(state, allow_nan=False))
    resign(snap, "state.json")


def _calibrator(state, key):
    """The encoded attributes of calibrator ``key`` in state.json."""
    tree = state["monitor"]["_calibrators"][key]
    assert tree["$"] == "object" and "attrs" in tree
    return tree["attrs"]


def _set_attr(key, name, value, *, inside=()):
    def edit(state):
        attrs = _calibrator(state, key)
        for part in inside:
            attrs = attrs[part]["attrs"]
        attrs[name] = value

    return edit


def _edit_batches(snap, batch, calibrator, **values):
    """Set fields of one row of batches.parquet (a callable value edits the old one)."""
    frame = pl.read_parquet(snap / "batches.parquet")
    rows = frame.to_dicts()
    hits = [r for r in rows if r["batch"] == batch and r["calibrator"] == calibrator]
    assert len(hits) == 1
    for name, value in values.items():
        hits[0][name] = value(hits[0]) if callable(value) else value
    pl.DataFrame(rows, schema=frame.schema).write_parquet(snap / "batches.parquet")
    resign(snap, "batches.parquet")
    return hits[0]


def _edit_array(snap, key, edit):
    frame = pl.read_parquet(snap / "arrays.parquet")
    rows = frame.to_dicts()
    (row,) = [r for r in rows if r["key"] == key]
    values = np.frombuffer(row["data"], dtype=np.dtype(row["dtype"])).reshape(row["shape"]).copy()
    edit(values)
    row["data"] = values.tobytes()
    pl.DataFrame(rows, schema=frame.schema).write_parquet(snap / "arrays.parquet")
    resign(snap, "arrays.parquet")


def _refused(snap, *parts):
    """Loading fails with a SnapshotError whose message holds every part (read literally)."""
    with pytest.raises(SnapshotError) as info:
        cw.Monitor.load(snap)
    message = str(info.value)
    for part in parts:
        assert part in message, message
    return message


def _nan():
    return {"$": "float", "value": "nan"}


# ---------------------------------------------------------------------------- untampered snapshots load
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_untampered_snapshots_of_every_kind_load(saved, kind):
    mon, path = saved[kind]
    loaded = cw.Monitor.load(path)
    assert loaded.status() == mon.status()
    assert loaded.summary().equals(mon.summary())
    for record in loaded._stream.batches:
        for key, stats in record.stats.items():
            assert stats.check(record.n_rows) == [], (record.index, key)
    for calibrator in loaded.calibrators.values():
        assert calibrator_problems(calibrator) == []


# ---------------------------------------------------------------------------- calibrator state
@pytest.mark.parametrize(
    ("key", "edit", "parts"),
    [
        ("lac", _set_attr("lac", "alpha", 1e308), ["calibrator 'lac'", "alpha (1e+308) is not in (0, 1)"]),
        ("lac", _set_attr("lac", "alpha", 0.0), ["calibrator 'lac'", "alpha (0.0) is not in (0, 1)"]),
        ("pac", _set_attr("pac", "epsilon", 1.5), ["calibrator 'pac'", "epsilon (1.5) is not in (0, 1)"]),
        ("pac", _set_attr("pac", "delta", -1e-5), ["calibrator 'pac'", "delta (-1e-05) is not in (0, 1)"]),
        ("pac", _set_attr("pac", "delta", "tiny"), ["calibrator 'pac'", "delta ('tiny') is not a number"]),
        (
            "aci",
            _set_attr("aci", "alpha_t_", {"$": "float", "value": "inf"}),
            ["calibrator 'aci'", "alpha_t_ (inf) is not finite"],
        ),
        (
            "aci",
            _set_attr("aci", "gamma", -0.5),
            ["calibrator 'aci'", "gamma (-0.5) is not a finite number > 0"],
        ),
        (
            "aci",
            _set_attr("aci", "alpha", 1e308, inside=("calibrator",)),
            ["calibrator 'aci'", "calibrator.alpha (1e+308) is not in (0, 1)"],
        ),
        ("lac", _set_attr("lac", "quantiles_", _nan()), ["calibrator 'lac'", "quantiles_ (nan) is NaN"]),
        (
            "by-class",
            lambda s: _calibrator(s, "by-class")["quantiles_"]["items"][2].__setitem__(1, _nan()),
            ["calibrator 'by-class'", "quantiles_[2] (nan) is NaN"],
        ),
        ("pac", _set_attr("pac", "threshold_", _nan()), ["calibrator 'pac'", "threshold_ (nan) is NaN"]),
        (
            "lac",
            _set_attr("lac", "n_calibration_", -3),
            ["calibrator 'lac'", "n_calibration_ (-3) is negative"],
        ),
    ],
)
def test_impossible_calibrator_state_is_refused(snapshot, key, edit, parts):
    snap = snapshot("pets")
    _edit_state(snap, edit)
    message = _refused(snap, "state.json: ", *parts)
    assert message.startswith(f"state.json: calibrator {key!r}: ")


def test_infinite_quantiles_are_allowed(snapshot):
    """An empty class's conformal quantile is +inf: a fitted threshold may be ±inf, never NaN."""
    snap = snapshot("pets")
    _edit_state(snap, _set_attr("lac", "quantiles_", {"$": "float", "value": "inf"}))
    assert cw.Monitor.load(snap).calibrators["lac"].quantiles_ == math.inf


def test_nan_in_a_fitted_array_names_arrays_parquet(snapshot):
    snap = snapshot("pets")
    key = json.loads((snap / "state.json").read_text())["monitor"]["_calibrators"]["risk"]["attrs"][
        "calibration_scores_"
    ]["key"]
    _edit_array(snap, key, lambda values: values.__setitem__(17, np.nan))
    _refused(snap, "arrays.parquet: calibrator 'risk': calibration_scores_[17] is NaN")


def test_nan_in_a_state_restored_calibrator_is_refused(snapshot):
    """Calibrators restored through their own state() (here MCC's scores) are checked after decoding."""
    snap = snapshot("regression")
    state = json.loads((snap / "state.json").read_text())
    arrays = state["monitor"]["_calibrators"]["mcc"]["via_state"]["arrays"]
    _edit_array(snap, arrays["scores"]["key"], lambda values: values.__setitem__(0, np.nan))
    _refused(snap, "arrays.parquet: calibrator 'mcc': scores_[0] is NaN")


# ---------------------------------------------------------------------------- set and risk batches
def _plus(field, index, amount):
    def edit(row):
        values = list(row[field])
        values[index] += amount
        return values

    return edit


def test_negative_class_labelled_is_refused(snapshot):
    snap = snapshot("pets")
    _edit_batches(snap, 3, "lac", class_labelled=_plus("class_labelled", 0, -10_000))
    _refused(snap, "batches.parquet: batch 3, calibrator 'lac': ", "class_labelled[0] (", ") is negative")


def test_negative_n_labelled_is_refused(snapshot):
    snap = snapshot("pets")
    _edit_batches(snap, 3, "risk", n_labelled=-5, n_missed=0)
    _refused(snap, "batches.parquet: batch 3, calibrator 'risk': n_labelled (-5) is negative")


def test_covered_above_labelled_is_refused(snapshot):
    snap = snapshot("pets")
    row = _edit_batches(snap, 2, "aci", class_covered=_plus("class_labelled", 1, 1))
    labelled = row["class_labelled"][1]
    _refused(
        snap,
        f"batches.parquet: batch 2, calibrator 'aci': class_covered[1] ({labelled + 1}) > "
        f"class_labelled[1] ({labelled})",
    )


def test_missed_above_labelled_is_refused(snapshot):
    snap = snapshot("pets")
    _edit_batches(snap, 3, "risk", n_missed=301)
    _refused(snap, "batches.parquet: batch 3, calibrator 'risk': n_missed (301) > n_labelled (300)")


def test_size_counts_must_sum_to_the_rows(snapshot):
    snap = snapshot("pets")
    _edit_batches(snap, 5, "pac", size_counts=_plus("size_counts", 2, 1))
    _refused(snap, "batches.parquet: batch 5, calibrator 'pac': size_counts sum to 401, not n_rows (400)")


@pytest.mark.parametrize(
    ("calibrator", "values", "part"),
    [
        (
            "lac",
            {"class_covered": lambda r: r["class_covered"][:-1]},
            "class_covered has length 3, not K (4)",
        ),
        ("aci", {"alpha_level": math.inf}, "alpha_level (inf) is not finite"),
        ("risk", {"risk_sum": 1e6}, "risk_sum (1000000.0) is not within [0.0, 400.0]"),
        ("risk", {"risk_sum": math.nan}, "risk_sum (nan) is NaN"),
        ("risk", {"risk_sum_labelled": 350.0}, "risk_sum_labelled (350.0) is not within [0.0, 300.0]"),
        ("risk", {"top_k": 0}, "top_k (0) is not a positive integer"),
        ("risk", {"n_rows": 401}, "n_rows (401) is not the batch's row count (400)"),
    ],
)
def test_other_impossible_batch_counts_are_refused(snapshot, calibrator, values, part):
    snap = snapshot("pets")
    _edit_batches(snap, 3, calibrator, **values)
    _refused(snap, f"batches.parquet: batch 3, calibrator {calibrator!r}: ", part)


def test_calibrators_of_a_batch_agree_on_its_labelled_rows(snapshot):
    snap = snapshot("pets")
    _edit_batches(
        snap, 3, "risk", n_labelled=299, n_missed=lambda r: min(r["n_missed"], 299), risk_sum_labelled=0.0
    )
    _refused(snap, "batches.parquet: batch 3: calibrators disagree on n_labelled (", "'risk': 299")


# ---------------------------------------------------------------------------- admit, selective, regression
def test_admitted_counts_are_nested(snapshot):
    snap = snapshot("admit")
    row = _edit_batches(snap, 1, "va", class_correct=lambda r: [a + 1 for a in r["class_admitted"]])
    _refused(
        snap,
        "batches.parquet: batch 1, calibrator 'va': ",
        f"class_correct[0] ({row['class_admitted'][0] + 1}) > class_admitted[0] ({row['class_admitted'][0]})",
    )


def test_admitted_rows_are_at_most_the_rows(snapshot):
    snap = snapshot("admit")
    _edit_batches(snap, 0, "va", n_admitted=101)
    _refused(snap, "batches.parquet: batch 0, calibrator 'va': n_admitted (101) > n_rows (100)")


def test_a_nan_selective_threshold_is_refused(snapshot):
    snap = snapshot("selective")
    _edit_batches(snap, 1, "sel", threshold=math.nan)
    _refused(snap, "batches.parquet: batch 1, calibrator 'sel': threshold (nan) is NaN")


def test_kept_counts_are_nested(snapshot):
    snap = snapshot("selective")
    row = _edit_batches(snap, 2, "sel", n_kept_correct=lambda r: r["n_kept_labelled"] + 1)
    _refused(
        snap,
        "batches.parquet: batch 2, calibrator 'sel': "
        f"n_kept_correct ({row['n_kept_labelled'] + 1}) > n_kept_labelled ({row['n_kept_labelled']})",
    )


@pytest.mark.parametrize(
    ("values", "part"),
    [
        ({"covered": lambda r: [r["covered"][0], 61]}, "covered[1] (61) > n_labelled (60)"),
        ({"crps_sum": -1.0}, "crps_sum (-1.0) is not within [0.0, inf]"),
        ({"crps_sum": math.nan}, "crps_sum (nan) is NaN"),
        ({"width_sum": lambda r: [r["width_sum"][0], math.nan]}, "width_sum[1] (nan) is NaN"),
        ({"levels": [0.5, 1.5]}, "levels[1] (1.5) is not in (0, 1)"),
    ],
)
def test_impossible_regression_statistics_are_refused(snapshot, values, part):
    snap = snapshot("regression")
    _edit_batches(snap, 1, "mcc", **values)
    _refused(snap, "batches.parquet: batch 1, calibrator 'mcc': ", part)


# ---------------------------------------------------------------------------- the checks on the types
def test_each_statistics_type_checks_itself():
    sets = CalibratorBatchStats(np.array([0, 3, 1]), np.array([2, 1]), np.array([3, 0]), 0.1)
    assert sets.check(4) == ["class_covered[0] (3) > class_labelled[0] (2)"]
    sets.class_labelled[1] = -1
    assert sets.check(4) == ["class_labelled[1] (-1) is negative"]  # no order asked of a broken count
    sets.class_labelled[1] = 3
    assert sets.check(4) == ["class_covered[0] (3) > class_labelled[0] (2)", "n_labelled (5) > n_rows (4)"]
    rows = AdmitRows(
        np.packbits(np.eye(2, dtype=bool), axis=1), 2, 0.1, {"admitted": np.array([True, False])}
    )
    admit = AdmitKind().observed(rows, 2)
    assert admit.check(2) == []
    admit.class_admitted[0] = 1
    assert admit.check(2) == [
        "class_admitted[0] (1) > class_labelled[0] (0)",
        "class_admitted sum to 1 but pred_admitted to 0: both count the labelled admitted rows",
    ]
    risk = RiskBatchStats(top_k=1, n_rows=10, risk_sum=2.5, n_labelled=4, n_missed=1, risk_sum_labelled=1.0)
    assert risk.check(10) == []
    assert risk.check(2) == [
        "n_rows (10) is not the batch's row count (2)",
        "n_labelled (4) > n_rows (2)",
        "risk_sum (2.5) is not within [0.0, 2.0]",
    ]
    kept = SelectiveBatchStats(n_rows=10, n_kept=10, threshold=-math.inf, n_labelled=1, n_kept_labelled=1)
    assert kept.check(10) == []  # every row kept, the labelled one among them
    kept.n_kept_labelled = 0  # ten kept rows, none labelled: but only nine rows are unlabelled
    assert kept.check(10) == ["unlabelled kept rows (10) > unlabelled rows (9)"]
    regression = RegressionBatchStats(levels=(0.5, 0.9), n_rows=3, width_sum=np.array([1.0, math.inf]))
    assert regression.check(3) == []  # an improper CDF's interval is infinitely wide
    regression.n_labelled = 2
    assert regression.check(3) == [
        "covered is empty but n_labelled is 2",
        "pit_counts sum to 0, not n_labelled (2)",
    ]
