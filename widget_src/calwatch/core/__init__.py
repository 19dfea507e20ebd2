"""Building blocks every layer above uses, with no calwatch imports of their own beyond the engine.

- :mod:`~calwatch.core.classes` — the class encoder (names ↔ integer codes) a monitor fixes once;
- :mod:`~calwatch.core.ids` — the id contract (one id type per monitor);
- :mod:`~calwatch.core.models` — model adapters (scikit-learn, PyTorch, callables, precomputed outputs);
- :mod:`~calwatch.core.codec` — the snapshot codec: JSON plus arrays, never pickle, and the trusted names;
- :mod:`~calwatch.core.guard` — the monitor's lock and the short yields that keep a kernel responsive;
- :mod:`~calwatch.core.invariants` — the checks that counts and orders are what a snapshot promises;
- :mod:`~calwatch.core.paged`, :mod:`~calwatch.core.scratch`, :mod:`~calwatch.core.heap` — memory-mapped
  history, scratch folders and returning freed memory;
- :mod:`~calwatch.core.frame_cache` — per-batch frames cached by token;
- :mod:`~calwatch.core.who` — who is writing (one rule for notes and acknowledgements).
"""

from calwatch.core.classes import ClassEncoder
from calwatch.core.codec import SnapshotError
from calwatch.core.guard import Guard
from calwatch.core.ids import check_id_kind, id_kind
from calwatch.core.models import ModelOutputs, wrap
from calwatch.core.who import default_author

__all__ = [
    "ClassEncoder",
    "Guard",
    "ModelOutputs",
    "SnapshotError",
    "check_id_kind",
    "default_author",
    "id_kind",
    "wrap",
]
