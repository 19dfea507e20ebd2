"""The newest readable version of a snapshot folder, rendered once for every reader.

:class:`SnapshotFeed` is what :mod:`calwatch.publish.server` serves. Its version is the SHA-256 of the
snapshot's ``manifest.json`` (which holds the size and checksum of every other file, and when
it was saved), so any save changes it. :meth:`SnapshotFeed.refresh` reads the manifest (cheap);
when it changed, it loads the snapshot with the ordinary loader (:meth:`Monitor.load
<calwatch.monitor.monitor.Monitor.load>`: checksums verified, no code executed) and renders the report's
parts (:func:`calwatch.publish.report.report_parts`) as JSON, once per version, whoever reads them.

A save replaces the folder by renames (:mod:`calwatch.snapshot.store`), so a read may meet the folder
missing or the next save's files: such a read is not an error, the feed keeps serving the last
good version and reads again on the next refresh. A snapshot that stays unreadable (the same
manifest fails twice) is reported in :attr:`SnapshotFeed.error` and not retried until it
changes. The feed never writes to the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calwatch.core.codec import SnapshotError
from calwatch.monitor.monitor import Monitor
from calwatch.publish.report import ReportParts, report_parts
from calwatch.snapshot.store import MANIFEST, read_manifest


@dataclass(frozen=True)
class SnapshotVersion:
    """One readable version of the snapshot, rendered.

    Attributes
    ----------
    version : str
        SHA-256 of its manifest (hex, first 32 digits).
    saved_at : str
        When it was saved (the manifest's ``saved_at``, UTC).
    batches : int
        Batches the monitor had observed.
    parts : ReportParts
        Its report parts (title, sections, the dashboard's state).
    report_json : bytes
        The parts and the version as the JSON the live page reads (``api/report``).
    """

    version: str
    saved_at: str
    batches: int
    parts: ReportParts
    report_json: bytes

    def summary(self) -> dict[str, Any]:
        """Version, time and batches (what ``api/version`` answers)."""
        return {"version": self.version, "saved_at": self.saved_at, "batches": self.batches}


class SnapshotFeed:
    """Follow one snapshot folder (see the module docstring).

    Parameters
    ----------
    path : path-like
        The snapshot folder (it may not exist yet: the feed waits for the first save).

    Attributes
    ----------
    path : Path
        The folder, resolved.
    current : SnapshotVersion or None
        The newest version read (None until one could be read).
    error : str
        Why the newest manifest could not be read (``""`` when it could).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            msg = f"path must be a snapshot folder path (str or path-like); got {type(path).__name__}"  # type: ignore[unreachable]
            raise TypeError(msg)
        self.path = Path(path).resolve()
        self.current: SnapshotVersion | None = None
        self.error = ""
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()  # one refresh at a time

    def manifest_version(self) -> str | None:
        """The version of the manifest on disk now (None if there is none at the moment)."""
        try:
            raw = (self.path / MANIFEST).read_bytes()
        except OSError:  # missing (between a save's renames, or not saved yet) or unreadable
            return None
        return hashlib.sha256(raw).hexdigest()[:32]

    def changed(self) -> bool:
        """Whether the manifest on disk differs from the version shown (cheap: one small read)."""
        version = self.manifest_version()
        shown = None if self.current is None else self.current.version
        return version is not None and version != shown and self._failures.get(version, 0) < 2

    def refresh(self) -> bool:
        """Read and render the snapshot if it changed; return whether :attr:`current` moved on.

        Never raises for an unreadable snapshot: the last good version stays current and
        :attr:`error` says why (once the same manifest failed twice).
        """
        with self._lock:
            if not self.changed():
                return False
            before = self.manifest_version()
            if before is None:
                return False
            try:
                manifest = read_manifest(self.path)
                monitor = Monitor.load(self.path)
                parts = report_parts(monitor, snapshot=manifest | {"path": str(self.path)})
            except Exception as err:  # unreadable now: keep the last good version
                if self.manifest_version() == before:  # not a save in progress: count it
                    self._failures[before] = self._failures.get(before, 0) + 1
                    if self._failures[before] >= 2:
                        named = isinstance(err, SnapshotError)
                        text = str(err) if named else f"{type(err).__name__}: {err}"
                        self.error = self._without_path(text)
                return False
            if self.manifest_version() != before:
                return False  # saved again while we read: read the newer one next time
            status = manifest.get("status")
            batches = int(status.get("batches", 0)) if isinstance(status, dict) else 0
            saved_at = str(manifest.get("saved_at", ""))
            report_json = parts.as_json(version=before).encode("utf-8")
            self.current = SnapshotVersion(before, saved_at, batches, parts, report_json)
            self.error = ""
            self._failures.clear()
            return True

    def _without_path(self, text: str) -> str:
        """An error's text with the snapshot's absolute path replaced by its name (errors are served)."""
        for shown in {str(self.path.resolve()), str(self.path.absolute()), str(self.path)}:
            if shown not in (".", ""):
                text = text.replace(shown, self.path.name)
        return text

    def version_json(self) -> bytes:
        """``{version, saved_at, batches, error}`` of the current version, as JSON."""
        shown = self.current.summary() if self.current is not None else {"version": None}
        return json.dumps(shown | {"error": self.error}).encode("utf-8")


__all__ = ["SnapshotFeed", "SnapshotVersion"]
