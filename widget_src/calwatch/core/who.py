"""Who is writing: one rule for every signature calwatch records (notes, acknowledgements, the widget).

On JupyterHub every user's kernel runs as one system account (often ``jovyan``), so the login
name says nothing; the hub's ``$JUPYTERHUB_USER`` does. ``$CALWATCH_AUTHOR`` overrides both, for
shared service accounts and tests.
"""

from __future__ import annotations

import getpass
import os


def default_author() -> str:
    """Who is writing: ``$CALWATCH_AUTHOR``, else ``$JUPYTERHUB_USER``, else the login name.

    Returns ``"unknown"`` where the environment has no user name (a container without one).
    """
    for variable in ("CALWATCH_AUTHOR", "JUPYTERHUB_USER"):
        value = os.environ.get(variable, "").strip()
        if value:
            return value
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


__all__ = ["default_author"]
