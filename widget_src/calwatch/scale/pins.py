"""What identifies an observed parquet file's content, so a changed log is refused, never half-read.

A monitor that observed a prediction log joins late labels to it by reading it again, maybe days
later. If the file was rewritten meanwhile (other probabilities under the same ids), replaced by
``os.replace`` while it was read, or joined by new files in its folder, the labels would land on
rows the monitor never counted — or polars reads the new bytes at the old footer's offsets and
fails with a raw "page header" error. So each observed file is *pinned*: its path, size,
modification time (ns) and the SHA-256 of its parquet footer, which holds every row group's
offsets, sizes and column statistics. Any rewrite moves at least one of them (a rewrite of equal
size and equal statistics still moves the modification time). The pins are taken before a file is
read and checked again after the read and before any later read: a difference is refused with an
error naming the file and what changed, before any statistic moves.

Hashing the footer rather than the whole file keeps a pin cheap (one small read at the end of
the file, whatever its size): checking a 10^9-row log's pins costs milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: A parquet file ends with its footer, the footer's length (4 bytes, little-endian) and ``PAR1``.
MAGIC = b"PAR1"
#: The most footer bytes a pin reads (a footer larger than this is refused as corrupt).
MAX_FOOTER = 1 << 30


class ChangedSourceError(ValueError):
    """An observed file changed, vanished or is not parquet: nothing was read from it and nothing moved."""


@dataclass(frozen=True)
class FilePin:
    """What one parquet file was when the monitor observed it.

    Attributes
    ----------
    path : str
        The file's absolute path, symbolic links resolved.
    size : int
        Its size in bytes.
    mtime_ns : int
        Its modification time, in nanoseconds.
    footer_sha256 : str
        The SHA-256 of its last ``8 + footer length`` bytes (the footer, its length, ``PAR1``).
    """

    path: str
    size: int
    mtime_ns: int
    footer_sha256: str

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FilePin:
        """Pin a parquet file as it is now.

        Raises
        ------
        ChangedSourceError
            Naming the file, if it cannot be read or is not a complete parquet file (a truncated
            copy, another format).
        """
        resolved = Path(path).resolve()
        try:
            with resolved.open("rb") as handle:
                before = os.fstat(handle.fileno())
                footer = _footer_bytes(handle, before.st_size, resolved)
        except OSError as err:
            msg = f"{resolved}: cannot be read ({err.strerror or err})"
            raise ChangedSourceError(msg) from err
        return cls(str(resolved), before.st_size, before.st_mtime_ns, hashlib.sha256(footer).hexdigest())

    def change(self) -> str | None:
        """What changed since the pin, in words (``None`` when nothing did)."""
        try:
            now = FilePin.of(self.path)
        except ChangedSourceError as err:
            return "is gone" if not Path(self.path).exists() else str(err).removeprefix(f"{self.path}: ")
        changes = []
        if now.size != self.size:
            changes.append(f"its size went from {self.size:,} to {now.size:,} bytes")
        if now.mtime_ns != self.mtime_ns:
            changes.append("it was modified")
        if now.footer_sha256 != self.footer_sha256:
            changes.append("its parquet footer differs (other row groups, offsets or statistics)")
        return "; ".join(changes) or None

    def to_json(self) -> dict[str, Any]:
        """The pin as a JSON object (for a snapshot)."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> FilePin:
        """A pin from :meth:`to_json`'s object.

        Raises
        ------
        ValueError
            If a field is missing or of the wrong type.
        """
        if not isinstance(value, dict):
            msg = f"a file pin must be an object; got {type(value).__name__}"
            raise ValueError(msg)
        path, size, mtime, sha = (value.get(k) for k in ("path", "size", "mtime_ns", "footer_sha256"))
        ints = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (size, mtime))
        if not (isinstance(path, str) and Path(path).is_absolute() and ints and isinstance(sha, str)):
            msg = f"a file pin needs an absolute path, a size, a mtime_ns and a footer_sha256; got {value!r}"
            raise ValueError(msg)
        return cls(path, int(size), int(mtime), sha)  # type: ignore[arg-type]


def _footer_bytes(handle: Any, size: int, path: Path) -> bytes:
    """The last ``8 + footer length`` bytes of a parquet file, refused naming ``path`` if malformed."""
    if size < 12:
        msg = f"{path}: is not a parquet file ({size} bytes: too short)"
        raise ChangedSourceError(msg)
    handle.seek(size - 8)
    tail = handle.read(8)
    (length,) = struct.unpack("<I", tail[:4])
    if tail[4:] != MAGIC:
        msg = f"{path}: is not a parquet file, or is truncated (it does not end with {MAGIC!r})"
        raise ChangedSourceError(msg)
    if length > min(size - 12, MAX_FOOTER):
        msg = f"{path}: is a corrupt parquet file (a footer of {length:,} bytes in a {size:,}-byte file)"
        raise ChangedSourceError(msg)
    handle.seek(size - 8 - length)
    footer: bytes = handle.read(length) + tail
    return footer


def pin_files(files: Sequence[str]) -> tuple[FilePin, ...]:
    """Pin each file (see :meth:`FilePin.of`)."""
    return tuple(FilePin.of(file) for file in files)


def check_pins(pins: Sequence[FilePin], when: str) -> None:
    """Raise :class:`ChangedSourceError` naming the first pinned file that changed, and how.

    Parameters
    ----------
    pins : sequence of FilePin
        The files to check.
    when : str
        Words for the moment of the change, e.g. ``"since it was observed"``.
    """
    for pin in pins:
        change = pin.change()
        if change is not None:
            msg = (
                f"{pin.path}: the prediction log changed {when} ({change}); its rows are no longer the "
                "rows the monitor counted, so nothing was read from it and nothing changed. Observe the "
                "new file as a new table, or restore the original"
            )
            raise ChangedSourceError(msg)


__all__ = ["ChangedSourceError", "FilePin", "check_pins", "pin_files"]
