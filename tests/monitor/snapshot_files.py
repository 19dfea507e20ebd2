"""Helpers for tests that damage or edit a saved snapshot's files."""

import hashlib
import json
from pathlib import Path


def resign(snap: Path, name: str) -> None:
    """Record a changed file's size and SHA-256 in manifest.json, as save_monitor does."""
    manifest = json.loads((snap / "manifest.json").read_text())
    data = (snap / name).read_bytes()
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (snap / "manifest.json").write_text(json.dumps(manifest, indent=2))
