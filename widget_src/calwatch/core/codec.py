"""Encode fitted calibrators and detectors as JSON plus numeric arrays — never pickle.

A snapshot must load without executing code from it. This codec walks an object graph and
writes plain JSON for scalars, strings and containers, a reference into an array table for
numpy arrays (numeric, boolean, string or datetime dtypes only), and for objects the dotted
name of their class together with their attributes. Decoding rebuilds objects without calling
their constructors (``cls.__new__`` then the attributes, or the class's own ``__setstate__``
when it defines ``__getstate__``/``__setstate__``, e.g. to rebuild a native index from arrays),
and only for classes defined in the ``calwatch`` package; anything else in a snapshot is
refused with :class:`SnapshotError`. A class whose attributes changed layout may define
``_after_decode()``, called once its attributes are set, to rebuild an older layout in the new
one (the code run is calwatch's own, never the snapshot's).

Shared references are kept: an object reached twice is written once and decoded as one
object, so a detector list that the monitor and its shift layer both hold stays shared.
"""

from __future__ import annotations

import importlib
import math
from collections import deque
from datetime import datetime
from types import FunctionType
from typing import Any

import numpy as np
import numpy.typing as npt

#: The package whose classes and functions a snapshot may name.
TRUSTED_PACKAGE = "calwatch"
#: numpy dtype kinds an array in a snapshot may have (no objects, no void records).
ARRAY_KINDS = frozenset("biufcUSMm")
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
                   "Philox": np.random.Philox, "SFC64": np.random.SFC64}  # fmt: skip
_TAG = "$"
#: Fitted objects saved through their own ``state() -> (arrays, info)`` and restored by the
#: classmethod ``from_state(arrays, info)`` (they hold torch or scikit-learn models inside, or
#: fitted parts rebuilt from plain arrays), with the attribute that marks them fitted (unfitted
#: ones are saved attribute by attribute).
VIA_STATE: dict[str, str] = {
    "calwatch.engine.selective.calibrator:SelectiveCalibrator": "threshold_",
    "calwatch.engine.selective.calibrator:BaselineSelector": "threshold_",
    "calwatch.engine.regression.calibrator:ModularConformalCalibrator": "scores_",
}

#: Modules that moved in the house layout (one engine subpackage per paper): a snapshot written
#: before the move names classes by their old module, which is read as the new one.
LEGACY_MODULES: dict[str, str] = {
    "calwatch.engine.quantiles": "calwatch.engine.conformal.quantiles",
    "calwatch.engine.scores": "calwatch.engine.conformal.scores",
    "calwatch.engine.conformal": "calwatch.engine.conformal.classifier",
    "calwatch.engine.conformal_regression": "calwatch.engine.conformal.regression",
    "calwatch.engine.adaptive": "calwatch.engine.conformal.adaptive",
    "calwatch.engine.weighted": "calwatch.engine.conformal.weighted",
    "calwatch.engine.knn_approx": "calwatch.engine.venn_admit.approximation",
    "calwatch.engine.knn_localizer": "calwatch.engine.venn_admit.localizer",
    "calwatch.engine.venn_admit": "calwatch.engine.venn_admit.admit",
    "calwatch.engine.venn_bands": "calwatch.engine.venn_admit.bands",
    "calwatch.engine.venn_results": "calwatch.engine.venn_admit.results",
    "calwatch.engine.venn_baselines": "calwatch.engine.venn_admit.baselines",
    "calwatch.engine.regression": "calwatch.engine.regression.calibrator",
    "calwatch.engine.regression_interpolation": "calwatch.engine.regression.interpolation",
    "calwatch.engine.regression_scores": "calwatch.engine.regression.scores",
    "calwatch.engine.regression_metrics": "calwatch.engine.regression.metrics",
    "calwatch.engine.selective": "calwatch.engine.selective.calibrator",
    "calwatch.engine.selective_features": "calwatch.engine.selective.features",
    "calwatch.engine.selective_loss": "calwatch.engine.selective.loss",
    "calwatch.engine.selective_perturb": "calwatch.engine.selective.perturb",
    "calwatch.engine.pac": "calwatch.engine.pac.sets",
    "calwatch.engine.risk": "calwatch.engine.risk.estimator",
    "calwatch.engine.binning": "calwatch.engine.calibration.binning",
    "calwatch.engine.calibration": "calwatch.engine.calibration.maps",
    "calwatch.engine.shift": "calwatch.engine.shift.detectors",
    "calwatch.engine.martingale": "calwatch.engine.shift.martingale",
    "calwatch.engine.monitors": "calwatch.engine.shift.monitors",
    "calwatch.engine.metrics": "calwatch.engine.metrics.intervals",
    "calwatch.engine.calibration_metrics": "calwatch.engine.metrics.calibration",
    # The second house move (the shift package):
    "calwatch.label_blocks": "calwatch.shift.label_blocks",
    "calwatch.looks": "calwatch.shift.looks",
    # The third house move (packages by layer):
    "calwatch.classes": "calwatch.core.classes",
    "calwatch.compare": "calwatch.monitor.compare",
    "calwatch.ids": "calwatch.core.ids",
    "calwatch.models": "calwatch.core.models",
    "calwatch.monitor": "calwatch.monitor.monitor",
    "calwatch.monitor_labels": "calwatch.monitor.labels",
    "calwatch.monitor_reads": "calwatch.monitor.reads",
    "calwatch.monitor_share": "calwatch.monitor.share",
    "calwatch.monitor_tables": "calwatch.monitor.tables",
    "calwatch.regression_monitor": "calwatch.monitor.regression",
    "calwatch.row_log": "calwatch.stream.row_log",
    "calwatch.stats_columns": "calwatch.stream.columns",
    "calwatch.stream": "calwatch.stream.records",
}
#: Classes that moved to another module after the house layout (names already read through
#: :data:`LEGACY_MODULES`).
LEGACY_CLASSES: dict[str, str] = {
    "calwatch.engine.shift.monitors:BernoulliBetting": "calwatch.engine.shift.betting:BernoulliBetting",
}


#: Modules split in the second house move: old module -> (top-level name -> its module now).
LEGACY_SPLIT: dict[str, dict[str, str]] = {
    "calwatch.stream.slices": {
        "SliceCounts": "calwatch.stream.slice_counts",
        "SliceStore": "calwatch.stream.slice_counts",
    },
    "calwatch.shift_watch": {
        "Acknowledgement": "calwatch.shift.watch",
        "BlockConfidenceMartingale": "calwatch.shift.label_free",
        "BlockDistanceMartingale": "calwatch.shift.label_free",
        "CalibrationData": "calwatch.shift.base",
        "ClassCoverageDropDetector": "calwatch.shift.on_labels",
        "ConfidenceMartingale": "calwatch.shift.label_free",
        "CoverageDropDetector": "calwatch.shift.on_labels",
        "Detector": "calwatch.shift.base",
        "LabelMartingale": "calwatch.shift.on_labels",
        "ReferenceDistanceMartingale": "calwatch.shift.label_free",
        "ShiftWatch": "calwatch.shift.watch",
        "_BlockMartingale": "calwatch.shift.label_free",
        "_Changes": "calwatch.shift.watch",
        "_CoverageUnits": "calwatch.shift.on_labels",
        "_MartingaleDetector": "calwatch.shift.base",
        "_NearestReference": "calwatch.shift.label_free",
        "_advance_run": "calwatch.shift.base",
        "_count_held": "calwatch.shift.on_labels",
        "_dependence_words": "calwatch.shift.on_labels",
        "_evidence_sentence": "calwatch.shift.on_labels",
        "_held_notice": "calwatch.shift.on_labels",
        "_martingale_guarantee": "calwatch.shift.base",
        "_nothing_to_restore": "calwatch.shift.base",
        "_positions": "calwatch.shift.on_labels",
        "_reworded": "calwatch.shift.on_labels",
        "_unsettled_words": "calwatch.shift.on_labels",
        "_warning_dict": "calwatch.shift.watch",
        "default_detectors": "calwatch.shift.watch",
        "detectors_kept_on_failure": "calwatch.shift.watch",
        "first_names": "calwatch.shift.base",
        "run_words": "calwatch.shift.base",
        "smallest_testable_count": "calwatch.shift.base",
    },
}


class SnapshotError(ValueError):
    """A snapshot could not be written or read (corrupt, truncated, or holding unsupported state)."""


class StateEncoder:
    """Turn an object graph into JSON-able values, collecting numpy arrays on the side.

    Examples
    --------
    >>> enc = StateEncoder()
    >>> tree = enc.encode({"q": np.array([0.5, 1.0]), "n": 3, "pair": (1, "a")})
    >>> tree["n"], tree["pair"], sorted(enc.arrays)
    (3, {'$': 'tuple', 'items': [1, 'a']}, ['a0'])
    >>> StateDecoder(enc.arrays).decode(tree)["q"].tolist()
    [0.5, 1.0]
    """

    def __init__(self) -> None:
        self.arrays: dict[str, npt.NDArray[Any]] = {}
        self._memo: dict[int, int] = {}
        self._keepalive: list[Any] = []  # ids stay unique while encoding

    def encode(self, value: Any, path: str = "state") -> Any:
        """The JSON-able form of ``value``; ``path`` names it in error messages."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return _encode_float(value)
        if isinstance(value, np.ndarray):
            return self._encode_array(value, path)
        if isinstance(value, np.generic):
            return {_TAG: "scalar", "dtype": value.dtype.str, "value": self.encode(value.item(), path)}
        if isinstance(value, list):
            return [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            items = [self.encode(v, f"{path}.{f}") for f, v in zip(value._fields, value, strict=True)]
            return {_TAG: "namedtuple", "class": _trusted_name(type(value), path), "items": items}
        if isinstance(value, tuple):
            return {_TAG: "tuple", "items": [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, dict):
            return self._encode_dict(value, path)
        if isinstance(value, (set, frozenset)):
            items = [self.encode(v, f"{path}{{}}") for v in sorted(value, key=repr)]
            return {_TAG: "frozenset" if isinstance(value, frozenset) else "set", "items": items}
        if isinstance(value, deque):
            items = [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return {_TAG: "deque", "items": items, "maxlen": value.maxlen}
        if isinstance(value, datetime):
            return {_TAG: "datetime", "value": value.isoformat()}
        if isinstance(value, np.dtype):
            return {_TAG: "dtype", "value": check_dtype(value, path).str}
        if isinstance(value, np.random.Generator):
            state = value.bit_generator.state
            return {_TAG: "generator", "state": self.encode(state, f"{path}.bit_generator")}
        if isinstance(value, FunctionType):
            return {_TAG: "function", "name": _trusted_name(value, path)}
        return self._encode_object(value, path)

    def _encode_array(self, value: npt.NDArray[Any], path: str) -> Any:
        if value.dtype.kind == "O":
            items = value.tolist()
            if value.ndim != 1 or not all(v is None or isinstance(v, (bool, int, float, str)) for v in items):
                msg = f"{path}: an object array can be saved only when 1-D and holding plain scalars"
                raise SnapshotError(msg)
            return {_TAG: "objarray", "items": [self.encode(v, path) for v in items]}
        check_dtype(value.dtype, path)
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.ascontiguousarray(value)
        return {_TAG: "array", "key": key}

    def _encode_dict(self, value: dict[Any, Any], path: str) -> Any:
        if all(isinstance(k, str) and k != _TAG for k in value):
            return {k: self.encode(v, f"{path}[{k!r}]") for k, v in value.items()}
        items = [[self.encode(k, f"{path}.key"), self.encode(v, f"{path}[{k!r}]")] for k, v in value.items()]
        return {_TAG: "dict", "items": items}

    def _encode_object(self, value: Any, path: str) -> Any:
        cls = type(value)
        name = _trusted_name(cls, path)
        ref = self._memo.get(id(value))
        if ref is not None:
            return {_TAG: "ref", "id": ref}
        ref = len(self._memo)
        self._memo[id(value)] = ref
        self._keepalive.append(value)
        if name in VIA_STATE and hasattr(value, VIA_STATE[name]):  # fitted: its own state(), arrays + JSON
            arrays, info = value.state()
            state = {
                "arrays": self.encode(arrays, f"{path}.state()"),
                "info": self.encode(info, f"{path}.state()"),
            }
            return {_TAG: "object", "class": name, "id": ref, "via_state": state}
        if _custom_state(cls):  # the class says what its state is (e.g. without a native index)
            state = self.encode(value.__getstate__(), f"{path}.__getstate__()")
            return {_TAG: "object", "class": name, "id": ref, "state": state}
        attrs = {k: self.encode(v, f"{path}.{k}") for k, v in _attributes(value).items()}
        return {_TAG: "object", "class": name, "id": ref, "attrs": attrs}


class StateDecoder:
    """Rebuild what :class:`StateEncoder` wrote, importing only ``calwatch`` classes."""

    def __init__(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self.arrays = arrays
        self._objects: dict[int, Any] = {}

    def decode(self, tree: Any) -> Any:
        """The value ``tree`` encodes."""
        if isinstance(tree, list):
            return [self.decode(v) for v in tree]
        if not isinstance(tree, dict):
            return tree
        tag = tree.get(_TAG)
        if tag is None:
            return {k: self.decode(v) for k, v in tree.items()}
        handler = _DECODERS.get(tag)
        if handler is None:
            msg = f"unknown entry type {tag!r} in the snapshot state"
            raise SnapshotError(msg)
        return handler(self, tree)

    def _array(self, tree: dict[str, Any]) -> Any:
        try:
            return self.arrays[tree["key"]]
        except KeyError as err:
            msg = f"the snapshot state refers to array {tree.get('key')!r}, which is missing"
            raise SnapshotError(msg) from err

    def _object(self, tree: dict[str, Any]) -> Any:
        cls = resolve_trusted(tree["class"])
        if not isinstance(cls, type):
            msg = f"{tree['class']} is not a class"
            raise SnapshotError(msg)
        if "via_state" in tree:
            if current_name(tree["class"]) not in VIA_STATE:
                msg = f"{tree['class']} is not restored from its state()"
                raise SnapshotError(msg)
            via = tree["via_state"]
            restore: Any = cls
            restored = restore.from_state(self.decode(via["arrays"]), self.decode(via["info"]))
            self._objects[int(tree["id"])] = restored
            return restored
        obj: Any = object.__new__(cls)
        self._objects[int(tree["id"])] = obj
        if "state" in tree:
            if not _custom_state(cls):
                msg = f"{tree['class']} does not restore a custom state"
                raise SnapshotError(msg)
            obj.__setstate__(self.decode(tree["state"]))
            return obj
        for key, value in tree["attrs"].items():
            object.__setattr__(obj, key, self.decode(value))  # also for frozen dataclasses and slots
        upgrade = getattr(cls, "_after_decode", None)
        if callable(upgrade):  # a calwatch class rebuilding an older layout of its attributes
            obj._after_decode()
        return obj

    def _namedtuple(self, tree: dict[str, Any]) -> Any:
        cls = resolve_trusted(tree["class"])
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            msg = f"{tree['class']} is not a named tuple"
            raise SnapshotError(msg)
        return tuple.__new__(cls, [self.decode(v) for v in tree["items"]])

    def _ref(self, tree: dict[str, Any]) -> Any:
        try:
            return self._objects[int(tree["id"])]
        except KeyError as err:
            msg = f"the snapshot state refers to object {tree.get('id')!r} before defining it"
            raise SnapshotError(msg) from err

    def _generator(self, tree: dict[str, Any]) -> Any:
        state = self.decode(tree["state"])
        bit_generator = _BIT_GENERATORS.get(str(state.get("bit_generator")))
        if bit_generator is None:
            msg = f"unsupported random bit generator {state.get('bit_generator')!r}"
            raise SnapshotError(msg)
        bits = bit_generator()
        bits.state = state
        return np.random.Generator(bits)

    def _function(self, tree: dict[str, Any]) -> Any:
        function = resolve_trusted(tree["name"])
        if not isinstance(function, FunctionType):
            msg = f"{tree['name']} is not a function"
            raise SnapshotError(msg)
        return function


def _decode_scalar(dec: StateDecoder, tree: dict[str, Any]) -> Any:
    dtype = check_dtype(np.dtype(tree["dtype"]), "scalar")
    return dtype.type(dec.decode(tree["value"]))


_DECODERS: dict[str, Any] = {
    "float": lambda dec, t: float(t["value"]),
    "tuple": lambda dec, t: tuple(dec.decode(v) for v in t["items"]),
    "dict": lambda dec, t: {_hashable(dec.decode(k)): dec.decode(v) for k, v in t["items"]},
    "set": lambda dec, t: {_hashable(dec.decode(v)) for v in t["items"]},
    "frozenset": lambda dec, t: frozenset(_hashable(dec.decode(v)) for v in t["items"]),
    "deque": lambda dec, t: deque((dec.decode(v) for v in t["items"]), maxlen=t["maxlen"]),
    "datetime": lambda dec, t: datetime.fromisoformat(t["value"]),
    "dtype": lambda dec, t: check_dtype(np.dtype(t["value"]), "dtype"),
    "objarray": lambda dec, t: np.array([dec.decode(v) for v in t["items"]], dtype=object),
    "scalar": _decode_scalar,
    "array": StateDecoder._array,
    "object": StateDecoder._object,
    "ref": StateDecoder._ref,
    "namedtuple": StateDecoder._namedtuple,
    "generator": StateDecoder._generator,
    "function": StateDecoder._function,
}


def _encode_float(value: float) -> Any:
    if math.isfinite(value):
        return value
    return {_TAG: "float", "value": repr(value)}  # "nan", "inf", "-inf": float() reads them back


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError as err:
        msg = f"a dictionary key or set member in the snapshot is not hashable: {value!r}"
        raise SnapshotError(msg) from err
    return value


def check_dtype(dtype: np.dtype[Any], path: str) -> np.dtype[Any]:
    """``dtype`` if a snapshot may hold arrays of it (numbers, booleans, strings, dates), else raise.

    Raises
    ------
    SnapshotError
        For object, void (record) and other dtypes whose bytes are not plain values.

    Examples
    --------
    >>> check_dtype(np.dtype("<f8"), "scores").str
    '<f8'
    >>> check_dtype(np.dtype("O"), "scores")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    calwatch.core.codec.SnapshotError: scores has dtype '|O', which snapshots never hold ...
    """
    if dtype.kind not in ARRAY_KINDS or dtype.fields is not None:
        msg = (
            f"{path} has dtype {dtype.str!r}, which snapshots never hold "
            "(numbers, booleans, strings and dates only)"
        )
        raise SnapshotError(msg)
    return dtype


def _custom_state(cls: type) -> bool:
    """Whether a class defines both ``__getstate__`` and ``__setstate__`` itself (pickle's protocol)."""
    return getattr(cls, "__getstate__", None) is not object.__getstate__ and hasattr(cls, "__setstate__")


def _attributes(value: Any) -> dict[str, Any]:
    """An object's state: its ``__dict__`` and the ``__slots__`` that are set."""
    attrs = dict(vars(value)) if hasattr(value, "__dict__") else {}
    for base in type(value).__mro__:
        slots = getattr(base, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                attrs[slot] = getattr(value, slot)
    return attrs


def _trusted_name(obj: Any, path: str) -> str:
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", "")
    if module.split(".")[0] != TRUSTED_PACKAGE or "<" in qualname:
        what = f"{module}.{qualname}" if module else repr(obj)
        msg = (
            f"{path}: {what} cannot be saved in a snapshot (only calwatch's own classes, arrays and "
            "plain values are; models are re-attached on load)"
        )
        raise SnapshotError(msg)
    return f"{module}:{qualname}"


def current_name(name: str) -> str:
    """``"module:qualname"`` with a module or class that moved renamed to where it is now.

    Examples
    --------
    >>> current_name("calwatch.engine.conformal:SplitConformalClassifier")
    'calwatch.engine.conformal.classifier:SplitConformalClassifier'
    >>> current_name("calwatch.engine.monitors:BernoulliBetting")
    'calwatch.engine.shift.betting:BernoulliBetting'
    >>> current_name("calwatch.shift_watch:ShiftWatch")
    'calwatch.shift.watch:ShiftWatch'
    >>> current_name("calwatch.monitor:Note")
    'calwatch.monitor.monitor:Note'
    """
    module_name, sep, qualname = str(name).partition(":")
    split = LEGACY_SPLIT.get(module_name)
    if split is not None:  # the module was split: the top-level name says where it went
        module_name = split.get(qualname.split(".")[0], module_name)
    renamed = f"{LEGACY_MODULES.get(module_name, module_name)}{sep}{qualname}"
    return LEGACY_CLASSES.get(renamed, renamed)


#: The calwatch modules whose classes a snapshot may name: the numerics, the calibrator kinds,
#: the table statistics and the monitor's own state. Checked *before* any import, so a snapshot
#: cannot make the loader import a module with effects of its own (the command line, the
#: Spark and Dask adapters, the server, the widget, the demo).
SNAPSHOT_MODULE_PREFIXES: tuple[str, ...] = (
    "calwatch.engine.", "calwatch.kinds.", "calwatch.scale.", "calwatch.shift.",
)  # fmt: skip
#: Modules under those prefixes that no snapshot holds and whose import has effects of its own
#: (the Spark and Dask adapters live in ``calwatch.scale``): refused before any import.
NEVER_IN_SNAPSHOTS: tuple[str, ...] = ("calwatch.scale.spark", "calwatch.scale.dask")
SNAPSHOT_MODULES: frozenset[str] = frozenset(
    {
        "calwatch.core.classes", "calwatch.monitor.compare", "calwatch.core.ids", "calwatch.kinds",
        "calwatch.core.models", "calwatch.monitor.monitor",
        "calwatch.monitor.labels", "calwatch.monitor.reads", "calwatch.monitor.share",
        "calwatch.monitor.tables", "calwatch.monitor.regression",
        "calwatch.stream.row_log", "calwatch.stream.columns", "calwatch.stream.records",
        "calwatch.stream.slices", "calwatch.stream.slice_counts",
    }
)  # fmt: skip


def snapshot_may_name(module_name: str) -> bool:
    """Whether a snapshot may name a class of ``module_name`` (:data:`SNAPSHOT_MODULES`).

    Examples
    --------
    >>> snapshot_may_name("calwatch.engine.shift.betting"), snapshot_may_name("calwatch.__main__")
    (True, False)
    >>> snapshot_may_name("calwatch.scale.kernel"), snapshot_may_name("calwatch.scale.spark_scan")
    (True, False)
    """
    if module_name.startswith(NEVER_IN_SNAPSHOTS):
        return False
    return module_name in SNAPSHOT_MODULES or module_name.startswith(SNAPSHOT_MODULE_PREFIXES)


def resolve_trusted(name: str) -> Any:
    """The class or function ``"module:qualname"`` names, if a snapshot may name it (checked first)."""
    module_name, _, qualname = current_name(name).partition(":")
    if module_name.split(".")[0] != TRUSTED_PACKAGE or not qualname or "<" in qualname:
        msg = f"the snapshot names {name!r}, which is not part of calwatch: refusing to load it"
        raise SnapshotError(msg)
    if not snapshot_may_name(module_name):
        msg = f"the snapshot names {name!r}, of a calwatch module no snapshot holds: refusing to load it"
        raise SnapshotError(msg)
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        msg = f"the snapshot names {name!r}, which this version of calwatch does not have"
        raise SnapshotError(msg) from err
    if getattr(target, "__module__", None) != module_name:
        msg = f"{name!r} is not defined in {module_name}: refusing to load it"
        raise SnapshotError(msg)
    return target
