"""Fixtures for the real-browser tests: a private JupyterLab server and a headless Chromium.

Recipe and pitfalls: /work/shared/STACK.md. Everything lives in temporary directories (config,
runtime, data, settings, workspaces, a copy of the notebooks); the server runs in its own
process group and is stopped, with its kernels, when the session ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
#: The kernel (and the server) run on the project's virtual environment, never a system Python.
KERNEL_PYTHON = _VENV_PYTHON if _VENV_PYTHON.exists() else Path(sys.executable)
DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: Notebooks copied into the server's root directory.
UI_NOTEBOOKS = ("00-widget-smoke.ipynb", "01-quickstart.ipynb")
KERNEL_NAME = "calwatch-venv"
SERVER_START_TIMEOUT_S = 60.0

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# User settings that keep dialogs and network lookups away.
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "autoStartDefaultKernel": True,
        "windowingMode": "none",  # every cell stays in the DOM
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LabServer:
    """A running JupyterLab: base URL, token, its root directory and log."""

    url: str
    token: str
    root: Path
    log_path: Path
    proc: subprocess.Popen[bytes]
    kernel_python: Path = KERNEL_PYTHON
    descendants: set[int] = field(default_factory=set)

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def lab_url(self, notebook: str) -> str:
        return f"{self.url}/lab/tree/{notebook}?token={self.token}&reset"

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def remember_children(self) -> None:
        """Record the PIDs of the server's descendants (kernels run in their own session)."""
        try:
            import psutil

            proc = psutil.Process(self.proc.pid)
            self.descendants.update(p.pid for p in proc.children(recursive=True))
        except Exception:
            pass


def _write_lab_dirs(base: Path) -> dict[str, str]:
    dirs = {
        "JUPYTER_CONFIG_DIR": base / "config",
        "JUPYTER_RUNTIME_DIR": base / "runtime",
        "JUPYTER_DATA_DIR": base / "data",
        "JUPYTERLAB_SETTINGS_DIR": base / "settings",
        "JUPYTERLAB_WORKSPACES_DIR": base / "workspaces",
        "IPYTHONDIR": base / "ipython",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    for rel, value in LAB_SETTINGS.items():
        target = dirs["JUPYTERLAB_SETTINGS_DIR"] / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(value))
    # The only kernel allowed: the project's interpreter, under its own name (in a venv,
    # jupyter_core prefers the env's kernelspecs over the user dir, so no shadowing "python3").
    spec_dir = dirs["JUPYTER_DATA_DIR"] / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [str(KERNEL_PYTHON), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (calwatch venv)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return {k: str(v) for k, v in dirs.items()}


def lab_command(root: Path, port: int, token: str, python: Path = KERNEL_PYTHON) -> list[str]:
    """The command that starts JupyterLab on 127.0.0.1 with a token, the test kernel only.

    ``python`` runs the server (the kernel is always the project's venv): the collaboration test
    passes the interpreter of ``.venv-rtc``.
    """
    return [
        str(python),
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--IdentityProvider.token={token}",
        "--allow-root",
        "--LabApp.extension_manager=readonly",
        "--LabApp.expose_app_in_browser=True",
        "--KernelSpecManager.ensure_native_kernel=False",
        f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}",
        f"--KernelSpecManager.allowed_kernelspecs={KERNEL_NAME}",
        "--ServerApp.terminals_enabled=False",
        f"--ServerApp.root_dir={root}",
    ]


def _stop_server(server: LabServer) -> None:
    server.remember_children()
    with contextlib.suppress(Exception):
        for kernel in server.api("/api/kernels"):
            with contextlib.suppress(Exception):
                server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
    proc = server.proc
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # its own process group (start_new_session)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # Kernels the server started (their own sessions) and that outlived it: by PID.
    try:
        import psutil
    except ImportError:
        return
    for pid in server.descendants:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.kill()
            p.wait(timeout=5)


@contextlib.contextmanager
def running_lab(
    base: Path, python: Path = KERNEL_PYTHON, extra_env: dict[str, str] | None = None
) -> Iterator[LabServer]:
    """JupyterLab on 127.0.0.1 with a random token, temp dirs under ``base`` and the venv's kernel.

    ``python`` runs the server; ``extra_env`` is added to its environment (the collaboration test
    names the main venv's data and config directories there).
    """
    env = {**os.environ, **_write_lab_dirs(base), "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    root = base / "root"
    root.mkdir()
    for name in UI_NOTEBOOKS:  # clean copies that name the test kernel
        nb = json.loads((REPO / "notebooks" / name).read_text())
        for cell in nb.get("cells", []):  # start clean even if outputs were committed
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        nb.setdefault("metadata", {})["kernelspec"] = {
            "name": KERNEL_NAME,
            "display_name": "Python 3 (calwatch venv)",
            "language": "python",
        }
        (root / name).write_text(json.dumps(nb, indent=1))
    port = _free_port()
    token = secrets.token_hex(24)
    cmd = lab_command(root, port, token, python)
    log_path = base / "jupyterlab.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log_path, proc)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                server.api("/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not answer /api/status within "
                        f"{SERVER_START_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
                    )
                time.sleep(0.1)
        specs = server.api("/api/kernelspecs")
        argv = specs["kernelspecs"][specs["default"]]["spec"]["argv"]
        assert list(specs["kernelspecs"]) == [KERNEL_NAME], specs
        assert argv[0] == str(KERNEL_PYTHON), f"kernel is not the venv's python: {argv}"
        yield server
    finally:
        _stop_server(server)
        log.close()


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """JupyterLab on 127.0.0.1 with a random token, temp dirs and the venv's kernel."""
    with running_lab(tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's Chromium (CALWATCH_CHROMIUM overrides). Missing = a failure, not a skip."""
    path = os.environ.get("CALWATCH_CHROMIUM", DEFAULT_CHROMIUM)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"Chromium not found at {path!r} (set CALWATCH_CHROMIUM or install it: `make "
            "chromium`, i.e. apt-get install chromium fonts-dejavu-core fonts-liberation). "
            "The browser tests need it; they do not skip."
        )
    return path


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[Any]:
    """Playwright's driver, one per session (a second ``sync_playwright()`` cannot start beside it)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:  # pragma: no cover
        pytest.fail(f"playwright (Python) is not installed: {err}; run `make test`")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def browser_context(
    playwright_driver: Any, chromium_path: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A headless Chromium with a fresh temp profile (Playwright never downloads a browser)."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    context = playwright_driver.chromium.launch_persistent_context(
        str(profile),
        executable_path=chromium_path,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 2000},
        device_scale_factor=1,
    )
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def page(browser_context: Any, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """A page whose console messages and errors are printed when the test ends.

    The messages are kept in ``page.console_messages_`` (``[console.<type>] text`` or
    ``[pageerror] text``).
    """
    page = browser_context.new_page()
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"[console.{m.type}] {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"[pageerror] {e}"))
    page.console_messages_ = messages  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        errors = [m for m in messages if m.startswith(("[console.error]", "[pageerror]"))]
        with capsys.disabled():
            print(f"\n--- browser console: {len(messages)} messages, {len(errors)} errors ---")
            for line in messages[:100]:
                print(line[:500])
        page.close()
