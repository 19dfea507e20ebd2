"""One rule for who signs: notes and acknowledgements alike (JupyterHub runs every kernel as one account)."""

from __future__ import annotations

import getpass

import pytest

from tests.synthetic import pets_monitor


def test_notes_and_acknowledgements_are_signed_by_the_hub_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CALWATCH_AUTHOR", raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "ana")
    monkeypatch.setattr(getpass, "getuser", lambda: "jovyan")  # the hub's shared system account
    mon = pets_monitor(0)
    episode = int(mon.warnings()["episode"][0])
    mon.acknowledge(episode, "retraining")
    note = mon.note("looked at the owls", batch=2)
    assert note.author == "ana"
    assert mon.warnings().filter(episode=episode)["ack_by"].to_list() == ["ana"]
    monkeypatch.setenv("CALWATCH_AUTHOR", "service")
    assert mon.note("nightly check").author == "service"
