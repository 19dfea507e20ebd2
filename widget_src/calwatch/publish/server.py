"""A live, read-only dashboard of a snapshot folder, served to any browser (tornado).

``calwatch serve PATH``, :func:`serve` and :meth:`Monitor.serve
<calwatch.monitor.monitor.Monitor.serve>` start a :class:`DashboardServer`: an asynchronous HTTP server
(tornado, on its own event loop in a background thread) that shows the snapshot at ``PATH`` with
the HTML report's page builder and JavaScript bundle (:func:`calwatch.publish.report.report_page`), and
redraws it in every open page, without a reload, within a second of each save (a monitor that
autosaves, :meth:`Monitor.autosave <calwatch.monitor.monitor.Monitor.autosave>`, saves after its
batches).

Routes (each needs the server's token, ``?token=...`` or ``Authorization: token ...``; without
it the answer is 403)::

    GET /              the live page (the report page, following the server)
    GET /api/version   {"version", "saved_at", "batches", "error"} of the snapshot shown;
                       with ?after=VERSION it answers once the version differs (a long poll,
                       at most LONG_POLL_S seconds; ?after= waits for the first save)
    GET /api/report    the report's parts and the dashboard's state of that version, as JSON

Nothing else: other paths get 404 and other methods 405. It is read-only: the server only reads
the folder (through :class:`~calwatch.publish.snapshot_feed.SnapshotFeed`: the ordinary loader, which
verifies checksums and never executes code), runs nothing a request asks for, and stopping it
leaves the snapshot as it was. Every text from users, labels or class names is escaped as in the
report. It listens on 127.0.0.1 by default (this machine only); the token is random
(:func:`secrets.token_urlsafe`, as Jupyter's) and compared in constant time. Pages get a
Content-Security-Policy that allows no request but to this server, no framing and no referrer.

It stays up under load (a page left open, a script that opens sockets and never writes): a
connection idle for ``idle_timeout`` seconds is closed; past ``max_connections`` open
connections (default 256) a new one is answered at once with ``503 Service Unavailable``,
``Retry-After: 1`` and a one-line plain-text reason, then closed; past ``max_long_polls``
concurrent long polls (default 64) a long poll gets that 503 too (rather than an immediate,
unchanged version, which would make pages poll in a tight loop), and a long poll whose client went
away gives its place back at once. When the process runs out of file descriptors (``EMFILE``,
``ENFILE``: ``ulimit -n`` below what ``max_connections`` needs) the server stops accepting for a
moment instead of retrying in a loop, logs one warning (at most one a minute), and accepts again
after ``ACCEPT_BACKOFF_S`` or as soon as a connection closes; the connections waiting meanwhile
stay in the listen backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import html
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tornado.web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets

from calwatch.publish.report import LIVE_CSP, report_page
from calwatch.publish.snapshot_feed import SnapshotFeed
from calwatch.snapshot.store import read_manifest

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
#: Open connections served at once; past it a new connection gets 503 and is closed.
MAX_CONNECTIONS = 256
#: Long polls (``api/version?after=``) waiting at once; past it a long poll gets 503.
MAX_LONG_POLLS = 64
#: Seconds the server stops accepting after ``accept()`` failed for want of descriptors.
ACCEPT_BACKOFF_S = 0.2
#: Seconds a refused connection may stay open after its 503 (for the client to read it).
REFUSAL_LINGER_S = 1.0
#: The same warning (out of descriptors, too many connections) is logged at most this often.
WARN_EVERY_S = 60.0
#: Descriptors are short: the accept() errors that pause accepting instead of failing.
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

logger = logging.getLogger("calwatch.publish.server")


class _Readers:
    """What the request handlers share: the feed, the token, and a wake-up for long polls."""

    def __init__(
        self,
        feed: SnapshotFeed,
        token: str,
        hosts: frozenset[str] | None = None,
        max_long_polls: int = MAX_LONG_POLLS,
    ) -> None:
        self.feed = feed
        self.token = token
        self.hosts = hosts  # the Host names a request may carry (None: any, for a non-loopback address)
        self.max_long_polls = max_long_polls
        self.long_polls = 0  # waiting now (on the server's loop only)
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
    _poll: asyncio.Future[None] | None = None

    async def get(self) -> None:
        after = self.get_query_argument("after", None)
        readers = self.readers
        if after is not None and readers.long_polls >= readers.max_long_polls:
            # 503 rather than the unchanged version at once: pages would poll again in a tight loop
            self.set_status(503)
            self.set_header("Retry-After", "1")
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(_too_many("long polls", readers.max_long_polls))
            return
        if after is not None:
            readers.long_polls += 1
            self._poll = asyncio.ensure_future(readers.wait_for_change(after, LONG_POLL_S))
            try:
                await self._poll
            except asyncio.CancelledError:
                if not self._poll.cancelled():
                    raise
                return  # the client went away (on_connection_close): nobody to answer
            finally:
                readers.long_polls -= 1
        self.send_json(readers.feed.version_json())

    def on_connection_close(self) -> None:
        """End the long poll of a client that went away, so that it gives its place back now."""
        if self._poll is not None:
            self._poll.cancel()


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
    """Requests to the ``calwatch.publish.server`` logger, by path only: tokens never reach a log."""
    status = handler.get_status()
    # 503: a refusal by design (too many long polls), not a fault: not an ERROR line per request
    level = (
        logging.ERROR if status >= 500 and status != 503 else logging.INFO if status >= 400 else logging.DEBUG
    )
    request = handler.request
    logger.log(level, "%d %s %s %.1f ms", status, request.method, request.path, 1000 * request.request_time())


def _too_many(what: str, limit: int) -> str:
    """The body of a 503: what is at its limit, and that a retry will do."""
    return f"calwatch serve: too many {what} (limit {limit}); try again shortly\n"


class _LimitedHTTPServer(HTTPServer):
    """tornado's HTTP server with a cap on open connections and an accept loop that survives EMFILE.

    Why not tornado's own (:func:`tornado.netutil.add_accept_handler`): it lets every ``accept()``
    error but ``EAGAIN`` and ``ECONNABORTED`` escape. Out of descriptors, the pending connection
    stays in the backlog, so the listening socket stays readable: the event loop calls the
    handler again at once, forever, one core busy and a traceback logged each time (megabytes a
    second). This one stops watching its sockets on such an error, warns once, and watches again
    after :data:`ACCEPT_BACKOFF_S` or as soon as one of its connections closes. The cap answers a
    connection past ``max_connections`` with a 503 when it is accepted, before any request.

    Parameters
    ----------
    *args, **kwargs
        Those of :class:`tornado.httpserver.HTTPServer`.
    max_connections : int
        Open connections served at once.
    """

    def initialize(self, *args: Any, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections
        self.open_connections = 0  # being served (on the server's loop only)
        body = _too_many("connections", max_connections).encode()
        self._refusal = (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Retry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        self._refusing: set[asyncio.Task[None]] = set()
        self._listening: list[socket.socket] = []
        self._watching = False
        self._retry: object | None = None  # the timeout that watches the sockets again
        self._warned: dict[str, float] = {}

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        """Accept connections on ``sockets`` (listening, non-blocking) with :meth:`_accept`."""
        self._listening.extend(sockets)
        self._watch()

    def stop(self) -> None:
        """Stop listening: forget and close the sockets (open connections stay)."""
        super().stop()
        self._unwatch()
        for sock in self._listening:
            sock.close()
        self._listening.clear()

    def on_close(self, server_conn: object) -> None:
        """A connection ended: count it, and accept again if descriptors had run out."""
        self.open_connections -= 1
        super().on_close(server_conn)
        if self._retry is not None:
            self._watch()

    def _watch(self) -> None:
        loop = IOLoop.current()
        if self._retry is not None:
            loop.remove_timeout(self._retry)
            self._retry = None
        if not self._watching and self._listening:
            for sock in self._listening:
                loop.add_handler(sock, self._accept, IOLoop.READ)
            self._watching = True

    def _unwatch(self) -> None:
        loop = IOLoop.current()
        if self._retry is not None:
            loop.remove_timeout(self._retry)
            self._retry = None
        if self._watching:
            for sock in self._listening:
                loop.remove_handler(sock)
            self._watching = False

    def _accept(self, sock: socket.socket, events: int) -> None:
        for _ in range(128):  # as tornado: a batch, then the other callbacks get their turn
            if not self._watching:
                return
            try:
                connection, address = sock.accept()
            except BlockingIOError:
                return  # every pending connection accepted
            except ConnectionAbortedError:
                continue  # closed by its client while in the backlog
            except OSError as err:  # EMFILE, ENFILE, ...: the socket stays readable, so pause
                self._unwatch()
                self._retry = IOLoop.current().call_later(ACCEPT_BACKOFF_S, self._watch)
                if err.errno in _OUT_OF_DESCRIPTORS:
                    self._warn(
                        "descriptors",
                        "calwatch serve: out of file descriptors (%s) with %d connections open; new "
                        "connections wait until some close (raise `ulimit -n` or lower max_connections)",
                        err.strerror,
                        self.open_connections,
                    )
                else:
                    self._warn("accept", "calwatch serve: accept() failed (%s); retrying shortly", err)
                return
            if self.open_connections >= self.max_connections:
                self._refuse(connection)
                continue
            try:
                stream = IOStream(
                    connection, max_buffer_size=self.max_buffer_size, read_chunk_size=self.read_chunk_size
                )
                self.handle_stream(stream, address)
            except Exception:
                connection.close()
                raise
            self.open_connections += 1  # until on_close, which the connection's task calls at its end

    def _refuse(self, connection: socket.socket) -> None:
        """Answer 503 now, then close (after the client read it, or :data:`REFUSAL_LINGER_S`)."""
        self._warn(
            "connections", "calwatch serve: %d connections open, refusing more (503)", self.max_connections
        )
        if len(self._refusing) >= self.max_connections:  # a flood: no descriptors for the answers
            connection.close()
            return
        task = asyncio.ensure_future(self._answer_and_close(IOStream(connection, max_buffer_size=65536)))
        self._refusing.add(task)
        task.add_done_callback(self._refusing.discard)

    async def _answer_and_close(self, stream: IOStream) -> None:
        # Closed at once, a connection whose request is unread is reset, and the client may never
        # see the answer: send it, end our side, read what comes until the client closes too.
        try:
            await stream.write(self._refusal)
            stream.socket.shutdown(socket.SHUT_WR)
            async with asyncio.timeout(REFUSAL_LINGER_S):
                while True:
                    await stream.read_bytes(65536, partial=True)
        except (StreamClosedError, OSError, TimeoutError):
            pass
        finally:
            stream.close()

    def _warn(self, key: str, message: str, *args: object) -> None:
        """Log ``message`` at most once every :data:`WARN_EVERY_S` seconds per ``key``."""
        now = time.monotonic()
        if now - self._warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[key] = now
            logger.warning(message, *args)


class DashboardServer:
    """Serve the live, read-only dashboard of the snapshot at ``path`` (see the module docstring).

    Parameters
    ----------
    path : path-like
        The snapshot folder (:meth:`Monitor.save <calwatch.monitor.monitor.Monitor.save>` or
        :meth:`Monitor.autosave <calwatch.monitor.monitor.Monitor.autosave>`). It may not exist yet: the
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
    max_connections : int
        Open connections served at once (default 256). Past it, a new connection is answered
        at once with ``503 Service Unavailable``, ``Retry-After: 1`` and the body ``calwatch
        serve: too many connections (limit N); try again shortly``, then closed. Each open
        connection holds a file descriptor: keep it below the process's limit (``ulimit -n``);
        should descriptors run out first, new connections wait in the listen backlog (one
        warning logged) until some close, instead of the server spinning.
    max_long_polls : int
        Long polls (``api/version?after=``) waiting at once (default 64). Past it, a long poll
        gets the same kind of 503 (``too many long polls``) rather than an immediate answer, so
        that pages back off instead of polling in a tight loop. A page holds one long poll.
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
        max_connections: int = MAX_CONNECTIONS,
        max_long_polls: int = MAX_LONG_POLLS,
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
        for name, limit in (("max_connections", max_connections), ("max_long_polls", max_long_polls)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                msg = f"{name} must be a positive integer (a count of connections); got {limit!r}"
                raise ValueError(msg)
        if not isinstance(allow_hosts, (tuple, list)) or not all(
            isinstance(h, str) and h for h in allow_hosts
        ):
            msg = f"allow_hosts must be a tuple of host names, e.g. ('myhost.local',); got {allow_hosts!r}"
            raise ValueError(msg)
        self.idle_timeout = float(idle_timeout)
        self.max_connections = max_connections
        self.max_long_polls = max_long_polls
        hosts = None if host not in _LOOPBACK else frozenset(_LOOPBACK) | {h.lower() for h in allow_hosts}
        self._readers = _Readers(self.feed, self.token, hosts, max_long_polls)
        self._http: _LimitedHTTPServer | None = None
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
        self._http = server = _LimitedHTTPServer(
            make_app(self._readers),
            idle_connection_timeout=self.idle_timeout,
            body_timeout=self.idle_timeout,
            max_connections=self.max_connections,
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
    idle_timeout: float = IDLE_TIMEOUT_S,
    allow_hosts: tuple[str, ...] = (),
    max_connections: int = MAX_CONNECTIONS,
    max_long_polls: int = MAX_LONG_POLLS,
) -> DashboardServer:
    """Serve the live, read-only dashboard of the snapshot at ``path``; return the running server.

    See :class:`DashboardServer` for the parameters. Open ``server.url`` in any browser; call
    ``server.stop()`` to stop (the snapshot is left as it is).
    """
    return DashboardServer(
        path, host=host, port=port, token=token, idle_timeout=idle_timeout, allow_hosts=allow_hosts,
        max_connections=max_connections, max_long_polls=max_long_polls,
    ).start()  # fmt: skip


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
