"""What the parts of a monitor share: its state and the helpers its coordinator defines.

:class:`~calwatch.monitor.monitor.Monitor` is built from parts (``monitor_labels``, ``monitor_reads``,
``monitor_share``), each a class of methods. :class:`MonitorState` declares, once, the attributes
and helpers those methods use, which :class:`~calwatch.monitor.monitor.Monitor` sets and defines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from calwatch.core.classes import ClassEncoder
from calwatch.core.guard import Guard
from calwatch.shift.watch import ShiftWatch
from calwatch.stream.records import StreamState


class MonitorState:
    """The state a monitor's parts read (set by :class:`~calwatch.monitor.monitor.Monitor`)."""

    _stream: StreamState
    _calibrators: dict[str, Any]
    _shift: ShiftWatch | None
    _encoder: ClassEncoder | None
    #: The kind of every id the monitor holds ("integers", "strings"...), fixed by its first
    #: observed rows on any path (:func:`calwatch.core.ids.check_id_kind`); None before any row, and
    #: in snapshots saved before the rule (then fixed by the next rows).
    _id_kind: str | None = None
    _next_auto_id: int
    name: str
    if TYPE_CHECKING:

        @property
        def classes_(self) -> npt.NDArray[Any]:
            """Class label of each probability column."""

        @property
        def _guard(self) -> Guard: ...

        def _send_notifications(self, batches: tuple[int, ...]) -> None: ...

        def _require_encoder(self) -> ClassEncoder: ...

        def _notify(self, batches: tuple[int, ...]) -> None: ...


__all__ = ["MonitorState"]
