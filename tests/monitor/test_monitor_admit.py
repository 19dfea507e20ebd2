"""Venn-ADMIT as a Monitor calibrator: reference set, embeddings, admitted predictions per row."""

import numpy as np
import polars as pl
import pytest

import calwatch as cw
from calwatch.engine.venn_admit.admit import VennAdmit


def _draw(rng, centres, n, spread=1.0):
    y = rng.integers(0, 3, n)
    E = (centres[y] + spread * rng.normal(size=(n, 8))).astype(np.float32)
    return E, E @ centres.T / 8, y


@pytest.fixture(scope="module")
def streamed():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 4
    reference = _draw(rng, centres, 600)
    E_ca, L_ca, y_ca = _draw(rng, centres, 800)
    mon = cw.Monitor(
        calibrators={
            "va": VennAdmit(alpha=0.1, kappa=5, epochs=5, progress=False),
            "lac": cw.SplitConformalClassifier(score="lac", alpha=0.1),
        },
        classes=["a", "b", "c"],
    )
    names = np.array(["a", "b", "c"])
    mon.calibrate(
        logits=L_ca,
        embeddings=E_ca,
        y=names[y_ca],
        reference=(reference[0], reference[1], names[reference[2]]),
    )
    batches = []
    for b in range(4):
        E, L, y = _draw(rng, centres, 200, spread=1.0 if b < 2 else 2.5)
        mon.observe(logits=L, embeddings=E, ids=[f"{b}-{i}" for i in range(200)])
        batches.append((E, L, y))
    for b, (_, _, y) in enumerate(batches[:3]):
        mon.label([f"{b}-{i}" for i in range(200)], names[y])
    return mon, batches


def test_rows_carry_the_engines_per_row_results(streamed):
    mon, batches = streamed
    va = mon.calibrators["va"]
    E, L, _ = batches[1]
    direct = va.predict(E, L)
    rows = mon.rows().filter(pl.col("batch") == 1)
    assert rows["q_va"].to_list() == direct["q"].to_list()
    assert np.allclose(rows["d_va"].to_numpy(), direct["d"].to_numpy())
    assert rows["admitted_va"].to_list() == direct["admitted"].to_list()
    assert rows["y_hat_va"].to_list() == [["a", "b", "c"][i] for i in direct["y_hat"].to_list()]
    assert [sorted(s) for s in rows["set_va"].to_list()] == [
        sorted(["a", "b", "c"][i] for i in s) for s in direct["admit_set"].to_list()
    ]


def test_summary_counts_admitted_predictions_and_their_accuracy(streamed):
    mon, batches = streamed
    va = mon.calibrators["va"]
    summary = mon.summary().filter(pl.col("calibrator") == "va").sort("batch")
    for b, (E, L, y) in enumerate(batches):
        out = va.predict_arrays(E, L)
        row = summary.row(b, named=True)
        assert row["admitted_share"] == pytest.approx(out.admitted.mean())
        if b < 3:
            assert row["n_admitted_labelled"] == int(out.admitted.sum())
            if out.admitted.any():
                right = out.y_hat[out.admitted] == y[out.admitted]
                assert row["admitted_accuracy"] == pytest.approx(right.mean())
            else:  # nothing admitted in this batch: no accuracy to report
                assert row["admitted_accuracy"] is None
            assert row["coverage"] == pytest.approx(out.sets[np.arange(200), y].mean())
        else:
            assert row["admitted_accuracy"] is None
    assert mon.summary().filter(pl.col("calibrator") == "lac")["admitted_share"].null_count() == 4


def test_admitted_accuracy_by_true_and_predicted_class(streamed):
    mon, batches = streamed
    va = mon.calibrators["va"]
    by_true = mon.admitted_accuracy()
    by_pred = mon.admitted_accuracy(by="predicted")
    y_hat = np.concatenate([va.predict_arrays(E, L).y_hat for E, L, _ in batches[:3]])
    admitted = np.concatenate([va.predict_arrays(E, L).admitted for E, L, _ in batches[:3]])
    y = np.concatenate([y for _, _, y in batches[:3]])
    for frame, key in ((by_true, y), (by_pred, y_hat)):
        for row in frame.iter_rows(named=True):
            c = "abc".index(row["class"])
            mask = admitted & (key == c)
            assert row["n_admitted"] == mask.sum()
            assert row["n_correct"] == (y_hat[mask] == y[mask]).sum()
            assert row["accuracy_lo"] <= row["accuracy"] <= row["accuracy_hi"]
    assert by_true["target"].unique().to_list() == [pytest.approx(0.9)]
    with pytest.raises(ValueError, match="by must be 'true' or 'predicted'"):
        mon.admitted_accuracy(by="model")


def test_relabelling_moves_admitted_counts(streamed):
    mon, batches = streamed
    before = mon.admitted_accuracy()["n_admitted"].sum()
    _, _, y = batches[0]
    flipped = np.array(["a", "b", "c"])[(y + 1) % 3]
    mon.label([f"0-{i}" for i in range(200)], flipped)
    assert mon.admitted_accuracy()["n_admitted"].sum() == before
    assert (
        mon.summary().filter((pl.col("calibrator") == "va") & (pl.col("batch") == 0))["admitted_accuracy"][0]
        == 0.0
    )
    mon.label([f"0-{i}" for i in range(200)], np.array(["a", "b", "c"])[y])


def test_missing_reference_or_embeddings_are_clear_errors():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(3, 8)) * 4
    E, L, y = _draw(rng, centres, 300)
    mon = cw.Monitor(calibrators={"va": VennAdmit(kappa=5, epochs=2, progress=False)})
    with pytest.raises(ValueError, match=r"reference is required: calibrators \['va'\]"):
        mon.calibrate(logits=L, embeddings=E, y=y)
    with pytest.raises(ValueError, match=r"calibrators\['va'\] \(Venn-ADMIT\) needs embeddings"):
        mon.calibrate(logits=L, y=y, reference=(E, L, y))
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier()})
    with pytest.raises(ValueError, match="reference must be None"):
        plain.calibrate(logits=L, y=y, reference=(E, L, y))
    mon.calibrate(logits=L, embeddings=E, y=y, reference=(E, L, y))
    with pytest.raises(ValueError, match="needs embeddings"):
        mon.observe(logits=L[:5])
    assert mon.n_batches == 0


def test_snapshot_round_trip_keeps_venn_admit_streaming(streamed, tmp_path):
    from polars.testing import assert_frame_equal

    mon, batches = streamed
    mon.save(tmp_path / "snap")
    loaded = cw.Monitor.load(tmp_path / "snap")
    assert_frame_equal(loaded.summary(), mon.summary())
    assert_frame_equal(loaded.rows(), mon.rows())
    assert_frame_equal(loaded.admitted_accuracy(), mon.admitted_accuracy())
    E, L, _ = batches[2]
    a = mon.calibrators["va"].predict(E, L)
    b = loaded.calibrators["va"].predict(E, L)
    assert_frame_equal(a, b)  # the rebuilt faiss indexes find the same neighbours


def test_venn_admit_panels(streamed):
    from calwatch.views import charts

    mon, batches = streamed
    kinds = charts.chart_kinds(mon)
    assert set(charts.ADMIT_CHARTS) <= set(kinds)
    for kind in charts.ADMIT_CHARTS:
        charts.build(kind, mon).to_dict()
    data = charts.datasets(mon)
    features = data["admit_features"]
    assert features["key"].n_unique() == len(features)
    for (_feature, source), part in features.group_by("feature", "source"):
        assert part["share"].sum() == pytest.approx(1.0)
        assert part["n"][0] == (800 if source == "calibration" else 4 * 200)
    va = mon.calibrators["va"]
    q_window = np.concatenate([va.predict_arrays(E, L).q for E, L, _ in batches])
    window_q = features.filter((pl.col("feature") == "q") & (pl.col("source") == "window")).sort("bin")
    assert window_q["count"].to_list() == np.bincount(q_window, minlength=va.k + 1).tolist()
    admit_class = data["admit_class"]
    assert admit_class["n_admitted"].sum() == mon.admitted_accuracy()["n_admitted"].sum()
    plain = cw.Monitor(calibrators={"lac": cw.SplitConformalClassifier()})
    assert not set(charts.ADMIT_CHARTS) & set(charts.chart_kinds(plain))


def test_a_venn_admit_that_admits_nothing_says_why():
    # classes that overlap in the embedding: the KNN approximation agrees with the model on
    # about 40% of rows and Venn-ADMIT admits nothing; notices() and status() say so and why
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(3, 8)) * 4

    def noise(n):
        return _draw(rng, centres, n, spread=3.0)

    mon = cw.Monitor(calibrators={"va": VennAdmit(epochs=2, progress=False)}, shift=None)
    mon.calibrate(**_named(noise(800)), reference=noise(600))
    before = mon.notices().filter(pl.col("calibrator") == "va")
    assert before.height == 1
    assert before["message"][0].startswith("Venn-ADMIT admits 0.0% of its calibration rows (D_ca^vp): ")
    va = mon.calibrators["va"]
    assert f"κ = {va.kappa_}" in before["examples"][0]
    E, L, _ = noise(300)
    mon.observe(logits=L, embeddings=E)
    after = mon.notices().filter(pl.col("calibrator") == "va")
    message = after["message"][0]
    assert message.startswith("Venn-ADMIT admits 0.0% of 300 observed rows: KNN agreement with the model")
    assert "Try an embedding whose neighbours share the model's prediction" in message
    assert mon.status()["admitting_nothing"] == 1


def _named(triple):
    E, L, y = triple
    return {"logits": L, "embeddings": E, "y": y}


def test_an_admitting_venn_admit_has_no_notice(streamed):
    mon, _ = streamed
    assert mon.summary().filter(pl.col("calibrator") == "va")["admitted_share"].mean() >= 0.01
    assert mon.notices().filter(pl.col("calibrator") == "va").height == 0
    assert mon.status()["admitting_nothing"] == 0
