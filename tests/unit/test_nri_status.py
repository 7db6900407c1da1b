"""numamem nri's status socket (numamem.nri.statusserver) and its probe, numamem nri-status."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from numamem.cli.main import main
from numamem.cli.nristatus import read_status
from numamem.errors import StartupError
from numamem.nri.statusserver import StatusServer


def test_each_connection_gets_the_status_as_it_is_now(tmp_path: Path) -> None:
    state = {"registered": False, "sessions": 0, "last_error": "NRI runtime not reachable"}
    server = StatusServer(str(tmp_path / "s.sock"), lambda: state)
    server.start()
    try:
        assert read_status(server.path, 2) == state
        state.update(registered=True, sessions=1)
        assert read_status(server.path, 2)["registered"] is True
        assert (tmp_path / "s.sock").stat().st_mode & 0o777 == 0o660
    finally:
        server.stop()
    assert not (tmp_path / "s.sock").exists()


def test_a_live_servers_socket_is_refused_and_a_dead_ones_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    first = StatusServer(path, lambda: {"registered": True})
    first.start()
    try:
        with pytest.raises(StartupError, match="served by another live process"):
            StatusServer(path, lambda: {"registered": False}).start()
        assert read_status(path, 2) == {"registered": True}  # the first one still serves
    finally:
        first.stop()
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # a socket file nobody listens on (a plugin that was killed)
    dead.close()
    second = StatusServer(path, lambda: {"registered": False})
    second.start()
    try:
        assert read_status(path, 2) == {"registered": False}
    finally:
        second.stop()


def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(tmp_path: Path) -> None:
    """The status socket follows the daemon's rule (numamem.socketpath): only a socket
    nobody listens on is replaced; a regular file at the path is refused, never deleted."""
    path = tmp_path / "s.sock"
    path.write_text("an operator's file")
    with pytest.raises(StartupError, match="exists and is not a socket; numamem never deletes"):
        StatusServer(str(path), lambda: {"registered": True}).start()
    assert path.read_text() == "an operator's file"


def test_a_report_that_fails_closes_that_connection_only(tmp_path: Path) -> None:
    calls = []

    def report() -> dict[str, object]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a defect")
        return {"registered": True}

    server = StatusServer(str(tmp_path / "s.sock"), report)
    server.start()
    try:
        with pytest.raises(ValueError):
            read_status(server.path, 2)  # nothing sent: not a status line
        assert read_status(server.path, 2) == {"registered": True}
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("status", "code", "stderr"),
    [
        ({"registered": True, "plugin": "50-numamem"}, 0, ""),
        (
            {"registered": False, "plugin": "50-numamem", "nri_socket": "/x/nri.sock",
             "last_error": "NRI runtime not reachable on /x/nri.sock: refused"},
            1,
            "numamem nri 50-numamem is not registered with the runtime (on /x/nri.sock): "
            "NRI runtime not reachable on /x/nri.sock: refused",
        ),
    ],
)  # fmt: skip
def test_the_probe_exits_0_only_while_registered(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    status: dict[str, object],
    code: int,
    stderr: str,
) -> None:
    server = StatusServer(str(tmp_path / "s.sock"), lambda: status)
    server.start()
    try:
        assert main(["nri-status", "--status-socket", server.path]) == code
    finally:
        server.stop()
    out, err = capsys.readouterr()
    assert '"registered": ' in out
    assert (stderr in err) if stderr else err == "", err


def test_the_probe_fails_on_what_is_not_a_plugins_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "other.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        assert main(["nri-status", "--status-socket", path, "--timeout", "5"]) == 1
    finally:
        thread.join(10)
        listener.close()
    assert f"no numamem nri status on {path}" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["inf", "-1", "nan", "0", "soon"])
def test_a_timeout_that_is_not_positive_seconds_is_a_usage_error(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--timeout`` as every other command takes it (cli.common.timeout_seconds): exit 2
    naming the value, not a traceback or a misleading "no status"."""
    with pytest.raises(SystemExit) as exited:
        main(["nri-status", "--status-socket", "/nonexistent.sock", "--timeout", timeout])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "expected seconds, more than 0" in err and timeout in err, err
