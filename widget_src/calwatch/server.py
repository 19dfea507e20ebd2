"""A live, read-only dashboard of a snapshot folder, served to any browser (tornado).

``calwatch serve PATH``, :func:`serve` and :meth:`Monitor.serve
<calwatch.monitor.Monitor.serve>` start a :class:`DashboardServer`: an asynchronous HTTP server
(tornado, on its own event loop in a background thread) that shows the snapshot at ``PATH`` with
the HTML report's page builder and JavaScript bundle (:func:`calwatch.report.report_page`), and
redraws it in every open page, without a reload, within a second of each save (a monitor that
autosaves, :meth:`Monitor.autosave <calwatch.monitor.Monitor.autosave>`, saves after its
batches).

Routes (each needs the server's token, ``?token=...`` or ``Authorization: token ...``; without
it the answer is 403)::

    GET /              the live page (the report page, following the server)
    GET /api/version   {"version", "saved_at", "batches", "error"} of the snapshot shown;
                       with ?after=VERSION it answers once the version differs (a long poll,
                       at most LONG_POLL_S seconds; ?after= waits for the first save)
    GET /api/report    the report's parts and the dashboard's state of that version, as JSON

Nothing else: other paths get 404 and other methods 405. It is read-only: the server only reads
the folder (through :class:`~calwatch.snapshot_feed.SnapshotFeed`: the ordinary loader, which
verifies checksums and never executes code), runs nothing a request asks for, and stopping it
leaves the snapshot as it was. Every text from users, labels or class names is escaped as in the
report. It listens on 127.0.0.1 by default (this machine only); the token is random
(:func:`secrets.token_urlsafe`, as Jupyter's) and compared in constant time. Pages get a
Content-Security-Policy that allows no request but to this server, no framing and no referrer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import logging
import os
import re
import secrets
import socket
import threading
from pathlib import Path
from typing import Any

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from calwatch.report import LIVE_CSP, report_page
from calwatch.snapshot_feed import SnapshotFeed
from calwatch.store import read_manifest

DEFAULT_HOST = "127.0.0.1"
#: How often the server looks at the snapshot's manifest (one small file read).
WATCH_INTERVAL_S = 0.1
#: The longest ``api/version?after=`` waits before answering with an unchanged version.
LONG_POLL_S = 25.0
#: Tokens: URL-safe characters (what :func:`secrets.token_urlsafe` gives), 16 at least.
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,}")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Seconds an open connection may stay idle (before or between requests) before it is closed.
IDLE_TIMEOUT_S = 20.0

logger = logging.getLogger("calwatch.server")


class _Readers:
    """What the request handlers share: the feed, the token, and a wake-up for long polls."""

    def __init__(self, feed: SnapshotFeed, token: str, hosts: frozenset[str] | None = None) -> None:
        self.feed = feed
        self.token = token
        self.hosts = hosts  # the Host names a request may carry (None: any, for a non-loopback address)
        self.stopping = False
        self._changed: asyncio.Event | None = None

    def changed_event(self) -> asyncio.Event:
        """The event set at the next change (created on the server's loop)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def notify(self) -> None:
        """On the server's loop: wake every long poll (a new version, a new error, or a stop)."""
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def wait_for_change(self, after: str, timeout: float) -> None:
        """Return once the version shown is not ``after``, the server stops, or ``timeout`` passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.stopping and _version_of(self.feed) == after:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self.changed_event().wait(), remaining)
            except TimeoutError:
                return


def _version_of(feed: SnapshotFeed) -> str:
    """The version shown, ``""`` before the first (so ``?after=`` waits for the first save)."""
    return "" if feed.current is None else feed.current.version


class _Handler(tornado.web.RequestHandler):
    """Every route: GET only, the token checked first, security headers, no cache, no tracebacks."""

    SUPPORTED_METHODS = ("GET",)

    def initialize(self, readers: _Readers) -> None:
        self.readers = readers

    def set_default_headers(self) -> None:
        self.clear_header("Server")
        self.set_header("Content-Security-Policy", LIVE_CSP + "; frame-ancestors 'none'")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("X-Frame-Options", "DENY")
        self.set_header("Cache-Control", "no-store")

    def prepare(self) -> None:
        hosts = self.readers.hosts
        if hosts is not None and self.request.host_name.lower().strip("[]") not in hosts:
            # A page of another site that rebinds its name to 127.0.0.1 sends its own Host.
            raise tornado.web.HTTPError(403, reason="Host not allowed")
        if not self._authorized():
            raise tornado.web.HTTPError(403)

    def _authorized(self) -> bool:
        given = self.get_query_argument("token", None)
        header = self.request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if given is None and scheme.lower() in ("token", "bearer"):
            given = value.strip()
        return given is not None and hmac.compare_digest(given.encode(), self.readers.token.encode())

    def compute_etag(self) -> None:
        return None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        if status_code == 403 and self._reason == "Host not allowed":
            self.finish("403 Forbidden: this view answers only to the names of its address (allow_hosts=).\n")
        elif status_code == 403:
            self.finish("403 Forbidden: this view needs its token (the URL calwatch serve printed).\n")
        else:
            self.finish(f"{status_code} {self._reason}\n")

    def send_json(self, body: bytes) -> None:
        """Answer with a JSON body."""
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(body)


class _PageHandler(_Handler):
    def get(self) -> None:
        current = self.readers.feed.current
        self.set_header("Content-Type", "text/html; charset=utf-8")
        if current is None:
            self.finish(_waiting_page(self.readers.feed.path))
        else:
            self.finish(report_page(current.parts, live_version=current.version))


class _VersionHandler(_Handler):
    async def get(self) -> None:
        after = self.get_query_argument("after", None)
        if after is not None:
            await self.readers.wait_for_change(after, LONG_POLL_S)
        self.send_json(self.readers.feed.version_json())


class _ReportHandler(_Handler):
    def get(self) -> None:
        current = self.readers.feed.current
        if current is None:
            raise tornado.web.HTTPError(404)
        self.send_json(current.report_json)


class _NotFound(_Handler):
    def get(self, *args: Any) -> None:
        raise tornado.web.HTTPError(404)


def make_app(readers: _Readers) -> tornado.web.Application:
    """The tornado application of the routes above."""
    kwargs = {"readers": readers}
    return tornado.web.Application(
        [
            (r"/", _PageHandler, kwargs),
            (r"/api/version", _VersionHandler, kwargs),
            (r"/api/report", _ReportHandler, kwargs),
        ],
        default_handler_class=_NotFound,
        default_handler_args=kwargs,
        log_function=_log_request,
        compress_response=True,
    )


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Requests to the ``calwatch.server`` logger, by path only: tokens never reach a log."""
    status = handler.get_status()
    level = logging.DEBUG if status < 400 else logging.INFO if status < 500 else logging.ERROR
    request = handler.request
    logger.log(level, "%d %s %s %.1f ms", status, request.method, request.path, 1000 * request.request_time())


class DashboardServer:
    """Serve the live, read-only dashboard of the snapshot at ``path`` (see the module docstring).

    Parameters
    ----------
    path : path-like
        The snapshot folder (:meth:`Monitor.save <calwatch.monitor.Monitor.save>` or
        :meth:`Monitor.autosave <calwatch.monitor.Monitor.autosave>`). It may not exist yet: the
        page then waits for the first save.
    host : str
        Address to listen on (default ``127.0.0.1``, this machine only; ``0.0.0.0`` for every
        interface: the traffic is plain HTTP, so prefer an SSH tunnel or a TLS proxy).
    port : int
        Port (default 0: a free one; :attr:`port` says which once started).
    token : str, optional
        The access token (default: :func:`secrets.token_urlsafe`), 16 or more URL-safe
        characters (letters, digits, ``-``, ``_``).
    watch_interval : float
        Seconds between looks at the snapshot's manifest.
    idle_timeout : float
        Seconds a connection may stay idle (no request, or headers never finished) before it is
        closed (default 20), so idle sockets cannot use up the process's file descriptors.
    allow_hosts : tuple of str
        Host names, besides the loopback ones, that requests may carry in their ``Host`` header
        when the server listens on a loopback address (as Jupyter's ``allow_remote_access``):
        a page of another site whose name resolves to 127.0.0.1 is refused with 403.

    Attributes
    ----------
    feed : SnapshotFeed
        The snapshot followed.
    token : str
        The access token.

    Raises
    ------
    TypeError, ValueError
        If an argument is of the wrong type or out of range (the message names it).

    Examples
    --------
    >>> server = DashboardServer("runs/flights").start()  # doctest: +SKIP
    >>> print(server.url)  # doctest: +SKIP
    >>> server.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        token: str | None = None,
        watch_interval: float = WATCH_INTERVAL_S,
        idle_timeout: float = IDLE_TIMEOUT_S,
        allow_hosts: tuple[str, ...] = (),
    ) -> None:
        if not isinstance(host, str) or not host:
            msg = f"host must be a non-empty address string, e.g. '127.0.0.1'; got {host!r}"
            raise ValueError(msg)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            msg = f"port must be an integer in 0..65535 (0: a free port); got {port!r}"
            raise ValueError(msg)
        if token is not None and not (isinstance(token, str) and TOKEN_PATTERN.fullmatch(token)):
            msg = "token must be 16 or more URL-safe characters (letters, digits, '-', '_')"
            raise ValueError(msg)
        interval_ok = isinstance(watch_interval, (int, float)) and not isinstance(watch_interval, bool)
        if not (interval_ok and watch_interval > 0):
            msg = f"watch_interval must be a positive number of seconds; got {watch_interval!r}"
            raise ValueError(msg)
        self.feed = SnapshotFeed(path)
        self.token = token if token is not None else secrets.token_urlsafe(32)
        self.host = host
        self.port = port
        self.watch_interval = float(watch_interval)
        idle_ok = isinstance(idle_timeout, (int, float)) and not isinstance(idle_timeout, bool)
        if not (idle_ok and idle_timeout > 0):
            msg = f"idle_timeout must be a positive number of seconds; got {idle_timeout!r}"
            raise ValueError(msg)
        if not isinstance(allow_hosts, (tuple, list)) or not all(
            isinstance(h, str) and h for h in allow_hosts
        ):
            msg = f"allow_hosts must be a tuple of host names, e.g. ('myhost.local',); got {allow_hosts!r}"
            raise ValueError(msg)
        self.idle_timeout = float(idle_timeout)
        hosts = None if host not in _LOOPBACK else frozenset(_LOOPBACK) | {h.lower() for h in allow_hosts}
        self._readers = _Readers(self.feed, self.token, hosts)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        """The page's address, token included (share it only with who may see the dashboard)."""
        host = socket.gethostname() if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/?token={self.token}"

    @property
    def running(self) -> bool:
        """Whether the server is listening."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> DashboardServer:
        """Read the snapshot, start listening (in a background thread) and return the server.

        Raises
        ------
        SnapshotError
            If ``path`` exists but is not a readable calwatch snapshot.
        OSError
            If the address cannot be bound (e.g. the port is taken).
        RuntimeError
            If the server was already started.
        """
        if self._thread is not None:
            msg = "this server was already started; build a new DashboardServer to serve again"
            raise RuntimeError(msg)
        if self.feed.path.exists() and not self.feed.refresh() and self.feed.current is None:
            read_manifest(self.feed.path)  # raises SnapshotError saying what is wrong with it
        sockets = bind_sockets(self.port, address=self.host)
        self.port = int(sockets[0].getsockname()[1])
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(sockets, ready), name=f"calwatch-serve:{self.port}", daemon=True
        )
        self._thread.start()
        ready.wait()
        if self._failure is not None:
            raise self._failure
        if self.host not in _LOOPBACK:
            logger.warning(
                "calwatch serve listens on %s: other machines can reach it, over plain HTTP", self.host
            )
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening and close every connection; the snapshot is left as it is."""
        loop, event = self._loop, self._stop_requested
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def serve_forever(self) -> None:
        """Start if needed, then block until interrupted (Ctrl-C), and stop."""
        if self._thread is None:
            self.start()
        try:
            while self.running:
                assert self._thread is not None
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self) -> DashboardServer:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"DashboardServer(path={str(self.feed.path)!r}, {self.host}:{self.port}, {state})"

    # ------------------------------------------------------------------ the server's thread
    def _run(self, sockets: list[socket.socket], ready: threading.Event) -> None:
        try:
            asyncio.run(self._main(sockets, ready))
        except BaseException as err:  # reported by start() if it happens before listening
            self._failure = err
            ready.set()
            if not isinstance(err, Exception):
                raise
            logger.exception("calwatch serve stopped on an error")

    async def _main(self, sockets: list[socket.socket], ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        # An idle connection (no request started, or headers never finished) is closed after
        # idle_timeout: idle sockets cannot pile up until descriptors run out.
        server = HTTPServer(
            make_app(self._readers), idle_connection_timeout=self.idle_timeout, body_timeout=self.idle_timeout
        )
        server.add_sockets(sockets)
        watcher = asyncio.create_task(self._watch())
        ready.set()
        try:
            await self._stop_requested.wait()
        finally:
            server.stop()
            self._readers.stopping = True
            self._readers.notify()
            await asyncio.sleep(0.05)  # long polls answer before their connections close
            await server.close_all_connections()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self) -> None:
        """Look at the manifest every ``watch_interval``; read a changed snapshot off the loop."""
        loop = asyncio.get_running_loop()
        while True:
            if self.feed.changed():
                error = self.feed.error
                moved = await loop.run_in_executor(None, self.feed.refresh)
                if moved or self.feed.error != error:
                    self._readers.notify()
            await asyncio.sleep(self.watch_interval)


def serve(
    path: str | os.PathLike[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    token: str | None = None,
) -> DashboardServer:
    """Serve the live, read-only dashboard of the snapshot at ``path``; return the running server.

    See :class:`DashboardServer` for the parameters. Open ``server.url`` in any browser; call
    ``server.stop()`` to stop (the snapshot is left as it is).
    """
    return DashboardServer(path, host=host, port=port, token=token).start()


def _waiting_page(path: Path) -> str:
    """The page shown until the first snapshot is saved: it reloads once one is."""
    return _WAITING.format(csp=LIVE_CSP, path=html.escape(str(path), quote=True))


_WAITING = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>calwatch: waiting for a snapshot</title>
</head>
<body style="font: 14px/1.45 system-ui, sans-serif; margin: 24px;">
<p id="calwatch-waiting">Waiting for the first snapshot at <code>{path}</code>;
this page shows it once it is saved.</p>
<script type="module">
const token = new URLSearchParams(location.search).get("token") ?? "";
for (;;) {{
  try {{
    const headers = {{ Authorization: "token " + token }};
    const response = await fetch("api/version", {{ headers, cache: "no-store" }});
    if (response.ok && (await response.json()).version) {{ location.reload(); break; }}
  }} catch {{}}
  await new Promise((resolve) => setTimeout(resolve, 500));
}}
</script>
</body>
</html>
"""

__all__ = ["DEFAULT_HOST", "DashboardServer", "make_app", "serve"]
