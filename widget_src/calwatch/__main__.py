"""Command line: ``python -m calwatch`` (or ``calwatch``) with subcommands.

- ``calwatch demo [--out DIR] [--seed N]``: stream NYC flights 2013 through a monitor, print
  the tables and write ``DIR/calwatch-demo.html`` (see :mod:`calwatch.demo`).
- ``calwatch report SNAPSHOT [-o FILE]``: a standalone HTML report of a saved monitor.
- ``calwatch serve SNAPSHOT [--host H] [--port P] [--allow-host NAME] [--max-connections N]``: a live,
  read-only dashboard of a snapshot for any browser, redrawn as the snapshot is saved again
  (see :mod:`calwatch.publish.server`).
- ``calwatch --version``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from calwatch import __version__

DEFAULT_DEMO_OUT = Path("demo-output")


def build_parser() -> argparse.ArgumentParser:
    """The ``calwatch`` argument parser (one sub-parser per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="calwatch",
        description="Watch, live in a notebook, whether a model's uncertainty can be trusted.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="stream NYC flights 2013 through a monitor and write the charts page",
        description=(
            "Calibrate a late-arrival classifier on April 2013, stream May-December month by "
            "month with labels arriving one month late, print coverage tables and write every "
            "chart into one self-contained HTML page (no network needed)."
        ),
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_DEMO_OUT,
        metavar="DIR",
        help=f"folder for calwatch-demo.html (default: {DEFAULT_DEMO_OUT})",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the flights model (default: 0)")
    demo.add_argument("--alpha", type=float, default=0.1, help="miscoverage level α (default: 0.1)")
    demo.set_defaults(handler=_run_demo)
    report = commands.add_parser(
        "report",
        help="write a standalone HTML report of a saved monitor",
        description=(
            "Read a snapshot folder written by Monitor.save and write one HTML file with every "
            "panel, the warning log, notes, configuration and provenance (opens with no kernel)."
        ),
    )
    report.add_argument("snapshot", type=Path, help="the snapshot folder")
    report.add_argument(
        "-o", "--out", type=Path, default=None, metavar="FILE",
        help="the HTML file (default: SNAPSHOT.html next to the folder)",
    )  # fmt: skip
    report.set_defaults(handler=_run_report)
    serve = commands.add_parser(
        "serve",
        help="serve a live, read-only dashboard of a snapshot to any browser",
        description=(
            "Serve the dashboard of a snapshot folder (written by Monitor.save or Monitor.autosave) "
            "to any browser, read-only, and redraw it in every open page within a second of each "
            "save. Prints the URL with its access token; requests without the token get 403. "
            "Ctrl-C stops the server and leaves the snapshot as it is."
        ),
    )
    serve.add_argument("snapshot", type=Path, help="the snapshot folder (it may be saved later)")
    serve.add_argument(
        "--host", default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; the traffic is plain HTTP)",
    )  # fmt: skip
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0: a free one)")
    serve.add_argument(
        "--token", default=None,
        help="access token, 16+ URL-safe characters (default: a random one; $CALWATCH_TOKEN if set)",
    )  # fmt: skip
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="a Host name requests may carry besides the loopback names (repeatable; as Jupyter's "
        "allow_remote_access)",
    )  # fmt: skip
    serve.add_argument(
        "--max-connections", type=int, default=256,
        help="open connections served at once; past it a new one gets 503 (default: 256)",
    )  # fmt: skip
    serve.add_argument(
        "--idle-timeout", type=float, default=20.0,
        help="seconds an idle connection stays open (default: 20)",
    )  # fmt: skip
    serve.set_defaults(handler=_run_serve)
    return parser


def _run_report(args: argparse.Namespace) -> int:
    from calwatch.core.codec import SnapshotError
    from calwatch.publish.report import write_report

    out = args.out if args.out is not None else args.snapshot.with_name(args.snapshot.name + ".html")
    try:
        path = write_report(args.snapshot, out)
    except SnapshotError as err:
        print(f"calwatch report: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    from calwatch.core.codec import SnapshotError
    from calwatch.publish.server import DashboardServer

    token = args.token or os.environ.get("CALWATCH_TOKEN") or None
    try:
        server = DashboardServer(
            args.snapshot, host=args.host, port=args.port, token=token, allow_hosts=tuple(args.allow_host),
            max_connections=args.max_connections, idle_timeout=args.idle_timeout,
        ).start()  # fmt: skip
    except (SnapshotError, ValueError, OSError) as err:
        print(f"calwatch serve: {err}", file=sys.stderr)
        return 1
    waiting = "" if server.feed.current is not None else " (waiting for the first save)"
    try:  # Ctrl-C may come at any moment once the URL is out, not only inside serve_forever
        print(f"calwatch serve: {server.feed.path}{waiting}")
        print(f"    {server.url}", flush=True)
        print("Read-only; Ctrl-C stops the server (the snapshot stays as it is).", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from calwatch.demo import run_demo

    try:
        run_demo(args.out, seed=args.seed, alpha=args.alpha)
    except ImportError as err:  # a missing optional extra: say which, without a traceback
        print(f"calwatch demo: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str | os.PathLike[str]] | None = None) -> int:
    """Run the command line; return the exit status.

    Parameters
    ----------
    argv : sequence of str or path-like, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    args = parser.parse_args(None if argv is None else [os.fspath(a) for a in argv])
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return int(handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
