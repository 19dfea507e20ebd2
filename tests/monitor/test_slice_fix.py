"""Fix in one step: ``Monitor.slice_calibrator``, calibrators with ``groups_from=``, ``what_if_slices``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.stream.slice_groups import categories_of, category_words, family_of, family_words
from calwatch.stream.slices import SliceError

# Eight calibration rows, two classes, every label 0, so each LAC score is p_1 = 1 − p_0:
# group a .1 .2 .3 .4, group b .5 .6 .7 .8. At α = 0.4 the rank in a group of 4 is ⌈5·0.6⌉ = 3:
# q_a = .3, q_b = .7; over all 8 rows ⌈9·0.6⌉ = 6: q̂ = .6.
SCORES = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
P_CAL = np.column_stack([1 - SCORES, SCORES])
Y_CAL = np.zeros(8, dtype=int)
META_CAL = pl.DataFrame({"g": ["a"] * 4 + ["b"] * 4, "h": [True, False] * 4})
# A row with p = (.65, .35): class 0 scores .35, class 1 .65.
ROW = np.array([[0.65, 0.35]])


def _monitor(**calibrators: object) -> cw.Monitor:
    cals = {"lac": cw.SplitConformalClassifier(score="lac", alpha=0.4), **calibrators}
    mon = cw.Monitor(calibrators=cals, shift=None)  # type: ignore[arg-type]
    mon.calibrate(probs=P_CAL, y=Y_CAL, meta=META_CAL)
    return mon


def test_mondrian_by_a_column_by_hand() -> None:
    mon = _monitor()
    fix = mon.slice_calibrator("g")
    assert isinstance(fix, cw.SplitConformalClassifier)
    assert fix.groups_from == ("g",) and fix.mondrian == "category" and fix.alpha == 0.4
    encoding = mon._slices.encoding  # type: ignore[union-attr]
    words = {category_words(encoding, ["g"], k): q for k, q in fix.quantiles_.items()}  # type: ignore[union-attr]
    assert words == pytest.approx({"g = a": 0.3, "g = b": 0.7})
    assert mon.calibrators["lac"].quantiles_ == pytest.approx(0.6)  # type: ignore[union-attr]
    # The same thresholds as fitting by hand on the codes.
    codes = encoding.codes(META_CAL, 8)
    manual = cw.SplitConformalClassifier(score="lac", alpha=0.4, mondrian="category")
    manual.fit(P_CAL, Y_CAL, categories=categories_of(encoding, codes, ["g"]))
    assert manual.quantiles_ == fix.quantiles_
    # In a monitor: a's row keeps {0} (.35 > .3, the top class joins), b's row gets {0, 1} (.65 ≤ .7).
    live = _monitor(by_g=fix)
    live.observe(
        probs=np.vstack([ROW, ROW]), ids=[10, 11], meta=pl.DataFrame({"g": ["a", "b"], "h": [True, True]})
    )
    rows = live.rows()
    assert rows["set_by_g"].to_list() == [[0], [0, 1]]
    assert rows["set_lac"].to_list() == [[0], [0]]


def test_a_family_of_two_columns_by_hand() -> None:
    mon = _monitor()
    fix = mon.slice_calibrator(["g", "h"])
    assert isinstance(fix, cw.GroupConditionalConformal)
    encoding = mon._slices.encoding  # type: ignore[union-attr]
    names = family_words(encoding, ["g", "h"])
    thresholds = dict(zip(names, fix.thresholds_.tolist(), strict=True))
    # g = a: .3, g = b: .7; h = True rows .1 .3 .5 .7 (rank 3: .5), h = False rows .2 .4 .6 .8 (.6).
    assert thresholds["g = a"] == pytest.approx(0.3) and thresholds["g = b"] == pytest.approx(0.7)
    assert thresholds["h = True"] == pytest.approx(0.5) and thresholds["h = False"] == pytest.approx(0.6)
    member = family_of(encoding, encoding.codes(META_CAL, 8), ["g", "h"])
    manual = cw.GroupConditionalConformal(score="lac", alpha=0.4).fit(P_CAL, Y_CAL, member)
    np.testing.assert_array_equal(manual.thresholds_, fix.thresholds_)
    # A row in g = a and h = True takes max(.3, .5) = .5: class 0 (.35) in, class 1 (.65) out.
    live = _monitor(fam=fix)
    live.observe(
        probs=np.vstack([ROW, ROW]), ids=[1, 2], meta=pl.DataFrame({"g": ["a", "b"], "h": [True, True]})
    )
    assert live.rows()["set_fam"].to_list() == [[0], [0, 1]]


def test_what_if_slices_counts_agree_with_the_slice_counts() -> None:
    rng = np.random.default_rng(3)
    P = rng.dirichlet([1, 1, 1], size=600)
    y = np.array([rng.choice(3, p=p) for p in P])
    meta = pl.DataFrame({"g": rng.choice(["a", "b", "c"], 600), "x": rng.normal(size=600)})
    mon = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier(score="lac")}, shift=None)
    mon.calibrate(probs=P[:300], y=y[:300], meta=meta[:300])
    for b in range(3):
        rows = np.arange(300 + 100 * b, 400 + 100 * b)
        mon.observe(probs=P[rows], y=y[rows], meta=meta[rows], ids=rows.tolist())
    fix = mon.slice_calibrator("g")
    assert isinstance(fix, cw.SplitConformalClassifier)
    preview = mon.what_if_slices(fix, name="by_g")
    lac = (
        preview.filter(pl.col("calibrator") == "lac").select("slice", "n_labelled", "n_covered").sort("slice")
    )
    single = pl.col("slice").str.starts_with("g ") & ~pl.col("slice").str.contains("&", literal=True)
    counted = mon.slices(min_rows=1).filter(single).sort("slice")
    assert_frame_equal(lac, counted.select("slice", "n_labelled", "n_covered"), check_dtypes=False)
    # The candidate's counts are those of its own sets on the same rows.
    window = mon.rows()
    encoding = mon._slices.encoding  # type: ignore[union-attr]
    codes = encoding.codes(meta[300:], 300)
    sets = fix.predict_sets(P[300:], categories=categories_of(encoding, codes, ["g"]))
    covered = sets[np.arange(300), y[300:]]
    by_value = pl.DataFrame(
        {"slice": meta[300:]["g"].map_elements(lambda v: f"g = {v}", return_dtype=pl.String), "c": covered}
    )
    expected = by_value.group_by("slice").agg(
        pl.len().alias("n_labelled"), pl.col("c").sum().alias("n_covered")
    )
    got = preview.filter(pl.col("candidate")).select("slice", "n_labelled", "n_covered").sort("slice")
    assert_frame_equal(got, expected.sort("slice"), check_dtypes=False)
    assert window.height == 300
    assert set(preview["target"].to_list()) == {0.9}


def test_the_calibration_rows_travel_in_snapshots_and_can_be_given(tmp_path: Path) -> None:
    mon = _monitor()
    mon.observe(probs=ROW, ids=[1], meta=META_CAL[:1])
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert loaded.slice_calibrator("g").quantiles_ == mon.slice_calibrator("g").quantiles_  # type: ignore[union-attr]
    loaded._slices.calibration = None  # type: ignore[union-attr]  # as in a snapshot saved before they were kept
    with pytest.raises(ValueError, match="pass them as probs=, y= and meta="):
        loaded.slice_calibrator("g")
    given = loaded.slice_calibrator("g", probs=P_CAL, y=Y_CAL, meta=META_CAL)
    assert given.quantiles_ == mon.slice_calibrator("g").quantiles_  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="go together"):
        loaded.slice_calibrator("g", probs=P_CAL)


def test_bad_input_names_what_is_wrong_and_changes_nothing() -> None:
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier()}, shift=None)
    plain.calibrate(probs=P_CAL, y=Y_CAL)
    with pytest.raises(ValueError, match="keeps no slices"):
        plain.slice_calibrator("g")
    mon = _monitor()
    with pytest.raises(SliceError, match=r"by: \['nope'\] is not a slice column"):
        mon.slice_calibrator("nope")
    with pytest.raises(ValueError, match="method must be"):
        mon.slice_calibrator("g", method="best")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="groups_from"):
        cw.Monitor(calibrators={"gc": cw.GroupConditionalConformal()})
    with pytest.raises(ValueError, match="groups_from must be"):
        cw.SplitConformalClassifier(groups_from=[])
    with pytest.raises(ValueError, match="mondrian=None or 'category'"):
        cw.SplitConformalClassifier(mondrian="label", groups_from="g")
    # A monitor whose calibrator takes its groups from slices: calibrate needs them.
    grouped = cw.Monitor(
        calibrators={"by_g": cw.SplitConformalClassifier(alpha=0.4, groups_from="g")}, shift=None
    )
    with pytest.raises(
        ValueError, match=r"calibrators\['by_g'\] takes its groups from the slice columns \['g'\]"
    ):
        grouped.calibrate(probs=P_CAL, y=Y_CAL)
    with pytest.raises(SliceError, match=r"calibrators\['by_g'\].groups_from: \['g'\] is not a slice column"):
        grouped.calibrate(probs=P_CAL, y=Y_CAL, meta=META_CAL.select("h"))
    assert grouped.calibration_ is None and grouped._slices is None
    grouped.calibrate(probs=P_CAL, y=Y_CAL, meta=META_CAL)
    before = grouped.summary()
    with pytest.raises(ValueError, match="categories must be None"):
        grouped.observe(probs=ROW, meta=META_CAL[:1], categories=["a"])
    assert_frame_equal(grouped.summary(), before)
    with pytest.raises(ValueError, match="already a calibrator"):
        mon.what_if_slices(mon.slice_calibrator("g"), name="lac")
    with pytest.raises(ValueError, match="name the slice column"):
        mon.what_if_slices(cw.SplitConformalClassifier(alpha=0.4).fit(P_CAL, Y_CAL))
