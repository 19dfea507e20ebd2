"""calwatch serve: the token, the routes, updates after a save, a snapshot left intact, and load limits."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from polars.testing import assert_frame_equal

import calwatch as cw
from calwatch.__main__ import main
from calwatch.publish.server import LONG_POLL_S, DashboardServer
from calwatch.publish.snapshot_feed import SnapshotFeed

from ..synthetic import pets_monitor, softmax_data

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    mon = pets_monitor()
    path = tmp_path_factory.mktemp("serve") / "pets"
    server = mon.serve(path, every_batches=1, every_seconds=None)
    yield mon, server
    server.stop()
    mon.stop_autosave()


def _get(server, route, *, token=None, headers=None, method="GET"):
    """(status, headers, body) of a request to the server; the token in the query by default."""
    token = server.token if token is None else token
    sep = "&" if "?" in route else "?"
    url = f"http://127.0.0.1:{server.port}{route}" + (f"{sep}token={token}" if token else "")
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=LONG_POLL_S + 10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def test_listens_on_127_0_0_1_with_a_random_token_in_its_url(served):
    _, server = served
    assert server.host == "127.0.0.1" and server.running
    assert server.url == f"http://127.0.0.1:{server.port}/?token={server.token}"
    assert len(server.token) >= 40  # secrets.token_urlsafe(32)
    other = DashboardServer(server.feed.path)
    assert other.token != server.token


@pytest.mark.parametrize("route", ["/", "/api/version", "/api/report", "/nothing-here"])
def test_requests_without_the_right_token_get_403(served, route):
    _, server = served
    assert _get(server, route, token="")[0] == 403
    assert _get(server, route, token=server.token[:-1] + "x")[0] == 403
    assert _get(server, route, token="", headers={"Authorization": "token wrong-token-0123456789"})[0] == 403
    _, _, body = _get(server, route, token="")
    assert b"needs its token" in body and server.token.encode() not in body


def test_the_right_token_gets_the_page_and_the_api_read_only(served):
    mon, server = served
    status, headers, page = _get(server, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "connect-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cache-Control"] == "no-store" and "Server" not in headers
    text = page.decode()
    assert "renderLive" in text and 'id="calwatch-sections"' in text
    assert "<b>here</b>" not in text and "drift starts &lt;b&gt;here&lt;/b&gt;" in text  # escaped
    assert "<img src=x" not in text
    authorization = {"Authorization": f"token {server.token}"}
    status, _, body = _get(server, "/api/version", token="", headers=authorization)
    version = json.loads(body)
    assert status == 200 and version["batches"] == mon.n_batches and version["error"] == ""
    status, headers, body = _get(server, "/api/report")
    report = json.loads(body)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert report["version"] == version["version"] and report["model"]["_status"]["batches"] == mon.n_batches
    assert "<" not in body.decode().replace("\\u003c", "")  # markup only as escapes, even in JSON
    assert _get(server, "/nothing-here")[0] == 404
    assert _get(server, "/api/version", method="POST")[0] == 405


def test_the_version_changes_after_a_save_and_a_long_poll_answers_at_once(served):
    mon, server = served
    before = json.loads(_get(server, "/api/version")[2])
    P, _ = softmax_data(300, seed=41)
    started = time.monotonic()
    mon.observe(probs=P, ids=[f"s{i}" for i in range(300)])  # the autosave writes the snapshot
    status, _, body = _get(server, f"/api/version?after={before['version']}")
    waited = time.monotonic() - started
    after = json.loads(body)
    assert status == 200 and after["version"] != before["version"]
    assert after["batches"] == before["batches"] + 1 == mon.n_batches
    # woken by the save, not by the long poll's own timeout (no tighter bound: a loaded machine)
    assert waited < LONG_POLL_S / 2, f"the long poll answered after {waited:.2f} s, not on the change"
    report = json.loads(_get(server, "/api/report")[2])
    assert report["version"] == after["version"] and report["model"]["_status"]["batches"] == mon.n_batches


def test_a_broken_save_keeps_the_last_good_version_and_says_why(tmp_path):
    mon = pets_monitor()
    path = mon.save(tmp_path / "snap")
    with DashboardServer(path, watch_interval=0.02) as server:
        good = json.loads(_get(server, "/api/version")[2])
        rows = path / "rows.parquet"
        rows.write_bytes(rows.read_bytes()[:-10] + b"0123456789")  # same size, wrong checksum
        (path / "manifest.json").write_text((path / "manifest.json").read_text() + " ")
        deadline = time.monotonic() + 10
        while not (version := json.loads(_get(server, "/api/version")[2]))["error"]:
            assert time.monotonic() < deadline, "the broken snapshot was never reported"
            time.sleep(0.05)
        assert version["version"] == good["version"] and "checksum" in version["error"]
        assert str(tmp_path) not in version["error"]  # served errors name the snapshot, not its absolute path
        assert _get(server, "/")[0] == 200


def test_waits_for_a_snapshot_not_yet_saved(tmp_path):
    mon = pets_monitor()
    with DashboardServer(tmp_path / "later", watch_interval=0.02) as server:
        status, _, page = _get(server, "/")
        assert status == 200 and b"Waiting for the first snapshot" in page
        assert json.loads(_get(server, "/api/version")[2])["version"] is None
        assert _get(server, "/api/report")[0] == 404
        mon.save(tmp_path / "later")
        version = json.loads(_get(server, "/api/version?after=")[2])
        assert version["batches"] == mon.n_batches


def test_stopping_leaves_the_snapshot_intact(tmp_path):
    mon = pets_monitor()
    path = mon.save(tmp_path / "snap")
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    server = cw.serve(path)
    assert _get(server, "/")[0] == 200
    server.stop()
    assert not server.running
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=2)
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()} == before
    assert_frame_equal(cw.Monitor.load(path).summary(), mon.summary())


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="port must be an integer"):
        DashboardServer(tmp_path, port=70000)
    with pytest.raises(ValueError, match="token must be 16 or more URL-safe"):
        DashboardServer(tmp_path, token="short")
    with pytest.raises(ValueError, match="host must be"):
        DashboardServer(tmp_path, host="")
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(cw.SnapshotError, match=r"no manifest\.json"):
        DashboardServer(tmp_path).start()
    mon = pets_monitor()
    with pytest.raises(ValueError, match="path must name a snapshot folder"):
        mon.serve()


def test_the_cli_passes_its_limits_to_the_server(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "later"), "--port", "0", "--max-connections", "0"]) == 1
    assert "max_connections must be a positive integer" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "later"), "--port", "0", "--idle-timeout", "-1"]) == 1
    assert "idle_timeout must be a positive number" in capsys.readouterr().err


def test_the_cli_refuses_a_folder_that_is_not_a_snapshot(tmp_path, capsys):
    (tmp_path / "data.csv").write_text("1,2")
    assert main(["serve", str(tmp_path), "--port", "0"]) == 1
    assert "calwatch serve:" in capsys.readouterr().err


@pytest.mark.parametrize("fetch_first", [True, False], ids=["after-a-request", "at-once"])
def test_the_cli_prints_the_url_with_its_token_and_stops_on_ctrl_c(tmp_path, fetch_first):
    # "at-once": Ctrl-C as soon as the URL is out, while the CLI may still be printing
    path = tmp_path / "not-saved-yet"  # the page waits for it (and the test for no report)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "calwatch", "serve", str(path), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    try:
        lines = []
        while not any("token=" in line for line in lines):
            line = proc.stdout.readline()
            assert line, f"calwatch serve exited: {''.join(lines)}"
            lines.append(line)
        url = next(line.strip() for line in lines if "token=" in line)
        assert url.startswith("http://127.0.0.1:")
        assert "waiting for the first save" in "".join(lines)
        if fetch_first:
            with urllib.request.urlopen(url, timeout=30) as response:
                assert response.status == 200
                assert b"Waiting for the first snapshot" in response.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_regression_snapshot_is_served_too(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=500)
    mon = cw.Monitor(
        task="regression", calibrators={"mcc": cw.ModularConformalCalibrator(prediction="point")}
    )
    mon.calibrate(pred=2 * x, y=2 * x + rng.normal(size=500))
    mon.observe(pred=2 * x[:100], ids=list(range(100)))
    feed = SnapshotFeed(mon.save(tmp_path / "reg"))
    assert feed.refresh() and feed.error == ""
    assert feed.current is not None and feed.current.batches == 1
    assert json.loads(feed.current.report_json)["model"]["_status"]["batches"] == 1
    assert not feed.refresh()  # unchanged: nothing read again


def test_a_wrong_host_gets_403_and_allowed_names_get_through(tmp_path):
    # A page of another site whose name is rebound to 127.0.0.1 sends its own Host (DNS rebinding).
    path = pets_monitor().save(tmp_path / "snap")
    with DashboardServer(path, allow_hosts=("dashboards.example",)) as server:
        status, _, body = _get(server, "/api/version", headers={"Host": f"evil.example:{server.port}"})
        assert status == 403 and b"names of its address" in body
        assert _get(server, "/api/version", headers={"Host": f"localhost:{server.port}"})[0] == 200
        assert _get(server, "/api/version", headers={"Host": f"dashboards.example:{server.port}"})[0] == 200
        assert _get(server, "/api/version")[0] == 200  # 127.0.0.1
    with pytest.raises(ValueError, match="allow_hosts"):
        DashboardServer(path, allow_hosts="dashboards.example")  # type: ignore[arg-type]


def test_idle_connections_are_closed_and_the_token_holder_is_still_served(tmp_path):
    import socket

    path = pets_monitor().save(tmp_path / "snap")
    with DashboardServer(path, idle_timeout=0.5) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
        half = socket.create_connection(("127.0.0.1", server.port))
        half.sendall(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
        start = time.monotonic()
        assert _get(server, "/api/version")[0] == 200  # served while the idle sockets are open
        for sock in [*idle, half]:
            sock.settimeout(5)
            assert sock.recv(1) == b""  # closed by the server after idle_timeout
            sock.close()
        assert time.monotonic() - start < 5
    with pytest.raises(ValueError, match="idle_timeout"):
        DashboardServer(path, idle_timeout=0)


def _wait_until(condition, timeout=5.0):
    """Poll ``condition`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the server"
        time.sleep(0.01)


def _token_holder_served_within(server_port, token, seconds):
    """Seconds until GET /api/version with the token answers 200, retrying while refused."""
    start = time.monotonic()
    url = f"http://127.0.0.1:{server_port}/api/version?token={token}"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=0.25) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):  # 503, or the backlog still full
            pass
        assert time.monotonic() - start < seconds, f"the token holder was not served within {seconds} s"
        time.sleep(0.02)


def test_connections_past_the_cap_get_503_and_the_token_holder_is_served_once_they_close(tmp_path):
    import socket

    path = pets_monitor().save(tmp_path / "snap")
    with DashboardServer(path, max_connections=4) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        _wait_until(lambda: server._http is not None and server._http.open_connections == 4)
        status, headers, body = _get(server, "/api/version")
        assert status == 503 and headers["Retry-After"] == "1"
        assert body == b"calwatch serve: too many connections (limit 4); try again shortly\n"
        extra = socket.create_connection(("127.0.0.1", server.port))  # never sends a request
        extra.settimeout(5)
        answer = b""
        while chunk := extra.recv(4096):  # the 503, then the server's end of the connection
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"(limit 4)" in answer
        extra.close()
        for sock in idle:
            sock.close()
        assert _token_holder_served_within(server.port, server.token, 1.0) < 1.0
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="max_connections must be a positive integer"):
            DashboardServer(path, max_connections=bad)
        with pytest.raises(ValueError, match="max_long_polls must be a positive integer"):
            DashboardServer(path, max_long_polls=bad)


def test_long_polls_past_the_cap_get_503_and_a_closed_one_frees_its_place(tmp_path):
    import socket

    path = pets_monitor().save(tmp_path / "snap")
    with DashboardServer(path, max_long_polls=1) as server:
        version = json.loads(_get(server, "/api/version")[2])["version"]
        poll = socket.create_connection(("127.0.0.1", server.port))
        request = f"GET /api/version?after={version}&token={server.token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        poll.sendall(request.encode())
        _wait_until(lambda: server._readers.long_polls == 1)
        started = time.monotonic()
        status, headers, body = _get(server, f"/api/version?after={version}")
        assert status == 503 and headers["Retry-After"] == "1"
        assert body == b"calwatch serve: too many long polls (limit 1); try again shortly\n"
        assert time.monotonic() - started < 2  # refused at once, not after a long poll
        assert _get(server, "/api/version")[0] == 200  # plain requests are not long polls
        poll.close()  # the client goes away: its long poll ends and frees its place
        _wait_until(lambda: server._readers.long_polls == 0, timeout=1.0)


_SERVE_WITH_FEW_DESCRIPTORS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
from calwatch.__main__ import main
sys.exit(main(["serve", sys.argv[1], "--port", "0", "--token", sys.argv[2]]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="descriptor limits are POSIX (resource.setrlimit)")
def test_running_out_of_descriptors_neither_spins_nor_floods_and_serves_again(tmp_path):
    # `ulimit -n 64` and 1,000 idle sockets: once accept() fails with EMFILE the server must stop
    # watching its socket for a while (tornado's own accept loop retries at once, forever, with
    # a traceback each time), and serve the token holder again once descriptors come free.
    import resource
    import socket

    import psutil

    n_idle = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n_idle + 200:
        wanted = n_idle + 200 if hard == resource.RLIM_INFINITY else min(hard, n_idle + 200)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        n_idle = min(n_idle, wanted - 200)
    token = "descriptor-test-token-0123456789"
    stderr_path = tmp_path / "stderr.txt"
    idle: list[socket.socket] = []
    with stderr_path.open("wb") as stderr:  # a file, not a pipe: a flood cannot block the child
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE_WITH_FEW_DESCRIPTORS, str(tmp_path / "none-yet"), token],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        lines = []
        while not any("token=" in line for line in lines):
            line = proc.stdout.readline()
            assert line, f"calwatch serve exited: {''.join(lines)}{stderr_path.read_text()}"
            lines.append(line)
        port = int(next(line for line in lines if "token=" in line).split(":")[2].split("/")[0])
        for _ in range(n_idle):  # non-blocking: most wait in (or beyond) the listen backlog
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            idle.append(sock)
        child = psutil.Process(proc.pid)
        _wait_until(lambda: child.num_fds() >= 60, timeout=10)  # out of descriptors (64)
        time.sleep(0.2)
        cpu_before, started = sum(child.cpu_times()[:2]), time.monotonic()
        time.sleep(2.0)
        cpu = sum(child.cpu_times()[:2]) - cpu_before  # user + system, every thread
        elapsed = time.monotonic() - started
        assert proc.poll() is None, stderr_path.read_text()[-2000:]
        assert cpu < 0.5, f"the server spun: {cpu:.2f} s of CPU in {elapsed:.2f} s"
        for sock in idle:
            sock.close()
        idle.clear()
        served_after = _token_holder_served_within(port, token, 1.0)
        log = stderr_path.read_text()
        assert len(log) < 20_000, f"{len(log)} bytes of stderr: {log[:2000]}"
        assert log.count("descriptors") == 1, log  # one warning, not one per attempt
        print(f"child: {cpu:.3f} s CPU in {elapsed:.2f} s; served {served_after:.3f} s after; {len(log)} B")
    finally:
        for sock in idle:
            sock.close()
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        if soft != resource.getrlimit(resource.RLIMIT_NOFILE)[0]:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
