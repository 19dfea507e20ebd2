"""One version source (package.json), an offline bundle, and the public API surface."""

import json
import re
from pathlib import Path

import numpy as np

import calwatch as cw

ROOT = Path(__file__).resolve().parents[1]


def test_version_comes_from_package_json():
    package = json.loads((ROOT / "package.json").read_text())
    assert cw.__version__ == package["version"]
    assert 'source = "nodejs"' in (ROOT / "pyproject.toml").read_text()


def test_bundle_is_built_and_offline():
    bundle = ROOT / "widget_src" / "calwatch" / "static" / "widget.js"
    text = bundle.read_text(encoding="utf-8")
    assert len(text) > 100_000, "the bundle must include vega, vega-lite and vega-embed"
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "esm.sh", "cdnjs.cloudflare.com"):
        assert not re.search(rf"import\([\"'][^\"']*{re.escape(cdn)}", text), cdn
        assert not re.search(rf"from\s*[\"'][^\"']*{re.escape(cdn)}", text), cdn


def test_js_dependencies_are_pinned_exactly():
    package = json.loads((ROOT / "package.json").read_text())
    for section in ("dependencies", "devDependencies"):
        for name, spec in package[section].items():
            assert re.fullmatch(r"\d+\.\d+\.\d+", spec), f"{name}: {spec} is not an exact pin"


def test_public_api():
    for name in ("Monitor", "SplitConformalClassifier", "wrap", "ModelOutputs", "LabelReport"):
        assert name in cw.__all__ and hasattr(cw, name)


def test_the_namespace_shows_only_public_names_and_the_detectors_are_public() -> None:
    import calwatch as cw

    assert dir(cw) == sorted(cw.__all__)
    assert not any(hasattr(cw, name) for name in ("Any", "annotations", "version", "PackageNotFoundError"))
    mon = cw.Monitor(
        calibrators={"lac": cw.SplitConformalClassifier(alpha=0.1)},
        shift=[cw.shift.ConfidenceMartingale(), cw.shift.CoverageDropDetector("lac")],
    )
    rng = np.random.default_rng(0)
    mon.calibrate(probs=rng.dirichlet(np.ones(3), 300), y=rng.integers(0, 3, 300))
    assert [type(d).__name__ for d in mon._shift.detectors] == [
        "ConfidenceMartingale",
        "CoverageDropDetector",
    ]
    assert set(cw.shift.__all__) >= {"ClassCoverageDropDetector", "LabelMartingale", "default_detectors"}


def test_the_regression_monitor_is_registered_explicitly() -> None:
    import pytest

    from calwatch.monitor.monitor import TASK_MONITORS, register_task
    from calwatch.monitor.regression import RegressionMonitor

    assert {"regression": RegressionMonitor} == TASK_MONITORS  # by calwatch/__init__.py, nothing else
    assert type(cw.Monitor(task="regression")) is RegressionMonitor
    with pytest.raises(TypeError, match="monitor_class must be a subclass of Monitor"):
        register_task("ranking", dict)
