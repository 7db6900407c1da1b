"""Issue 38: a socket path is deleted only when nobody listens on it (ECONNREFUSED), and a
daemon removes at shutdown only the socket it bound itself, never a newcomer's (grpcio's own
unlink at stop included)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from numamem.api import sockets
from numamem.api.metrics import Metrics, MetricsServer
from numamem.api.podresources import PodResourcesComponent
from numamem.api.server import Daemon
from numamem.api.sockets import BoundSocket, bind_unix_socket
from numamem.config.model import Config
from numamem.errors import StartupError
from numamem.memorymanager.manager.writes import Manager
from numamem.socketpath import prepare_socket_path, probe_connect
from tests.daemon import no_dac_override
from tests.unit.test_metrics import scrape_unix
from tests.unit.test_server import FakeComponent, health_status


@pytest.fixture
def sock(short_root: Path) -> str:
    return str(short_root / "s.sock")


def identity(path: str) -> tuple[int, int]:
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode)
    return st.st_dev, st.st_ino


def listener(path: str, backlog: int = 16) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(backlog)
    return s


@pytest.fixture
def full_backlog(sock: str) -> Iterator[socket.socket]:
    """A live listener that accepts nothing and whose backlog is full: a connect() gets EAGAIN
    (a busy or stalled daemon looks like this)."""
    server = listener(sock, backlog=0)
    queued = []
    try:
        for _ in range(64):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            queued.append(client)
            try:
                client.connect(sock)
            except BlockingIOError:
                break
        else:
            pytest.fail("the backlog never filled")
        yield server
    finally:
        for client in queued:
            client.close()
        server.close()


def test_a_full_backlog_is_refused_naming_eagain_and_the_socket_is_kept(
    sock: str, full_backlog: socket.socket
) -> None:
    before = identity(sock)
    with pytest.raises(StartupError) as info:
        prepare_socket_path(sock)
    message = str(info.value)
    assert message.startswith(f"--socket '{sock}': a test connection to the socket there ")
    assert "failed with EAGAIN (resource temporarily unavailable)" in message
    assert "accept backlog is full" in message
    assert "only when the connection is refused (ECONNREFUSED" in message
    assert "choose another --socket" in message
    assert identity(sock) == before  # not deleted


def test_a_daemon_does_not_take_over_a_live_daemons_socket_whose_backlog_is_full(
    short_root: Path, sock: str, full_backlog: socket.socket
) -> None:
    """The whole start refuses (exit 1 in `serve`), and the path stays the live one's."""
    before = identity(sock)
    config = Config(socket=sock, state_dir=str(short_root / "state"), shutdown_grace_seconds=1)
    with pytest.raises(StartupError, match="EAGAIN"):
        Daemon(config, lambda cfg: [FakeComponent()], set_umask=False).start()
    assert identity(sock) == before


def test_a_live_socket_is_refused_and_kept(sock: str) -> None:
    with listener(sock):
        before = identity(sock)
        with pytest.raises(StartupError, match="is served by another live process"):
            prepare_socket_path(sock, "--metrics-socket")
        assert identity(sock) == before


def test_a_file_that_is_not_a_socket_is_refused_and_kept(sock: str) -> None:
    Path(sock).write_text("precious")
    with pytest.raises(StartupError, match="exists and is not a socket; numamem never deletes"):
        prepare_socket_path(sock)
    assert Path(sock).read_text() == "precious"


def test_a_socket_nobody_listens_on_is_removed(sock: str) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock)
    dead.close()  # the file stays; a connect() gets ECONNREFUSED
    prepare_socket_path(sock)
    assert not os.path.lexists(sock)


def test_a_socket_this_user_may_not_connect_to_is_refused_and_kept(sock: str) -> None:
    """EACCES: another user's socket (here: mode 0, and, as root, CAP_DAC_OVERRIDE dropped)."""
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock)
    dead.close()
    os.chmod(sock, 0)
    code = (
        "import sys; from numamem.socketpath import prepare_socket_path\n"
        "try:\n    prepare_socket_path(sys.argv[1])\n"
        "except Exception as err:\n    print(err)\n"
    )
    out = subprocess.run(
        [*no_dac_override(), sys.executable, "-c", code, sock],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "failed with EACCES (permission denied)" in out.stdout, out
    assert os.path.lexists(sock)


def no_hard_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system without hard links (some FUSE or network file systems): link() EPERM."""

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), dst)

    monkeypatch.setattr(sockets.os, "link", refuse)


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "without-hard-links"])
def test_a_socket_created_after_the_check_is_not_replaced_by_the_bind(
    sock: str, monkeypatch: pytest.MonkeyPatch, links: bool
) -> None:
    """Between prepare_socket_path and the bind another process binds the path: the bind
    refuses (link(), not rename(); without hard links, renameat2 with RENAME_NOREPLACE: the
    review of issue 38 found the fallback was os.rename, which silently replaced it), the
    other socket stays, no temporary name is left."""
    if not links:
        no_hard_links(monkeypatch)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    with listener(sock):
        before = identity(sock)
        with pytest.raises(StartupError, match="created by another process while numamem"):
            bind_unix_socket(server, sock, "--socket")
        assert identity(sock) == before
        assert os.listdir(os.path.dirname(sock)) == ["s.sock"]
    server.stop(None).wait()


def test_without_hard_links_the_socket_is_renamed_into_place(
    sock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_hard_links(monkeypatch)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    bound = bind_unix_socket(server, sock, "--socket")
    server.start()
    try:
        assert os.listdir(os.path.dirname(sock)) == ["s.sock"]
        assert (bound.device, bound.inode) == identity(sock)
        assert probe_connect(sock) is None
    finally:
        server.stop(None).wait()
    assert bound.remove() and not os.path.lexists(sock)


def test_without_hard_links_or_renameat2_the_start_is_refused(
    sock: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_hard_links(monkeypatch)

    def no_renameat2(src: str, dst: str) -> None:
        raise OSError(errno.ENOSYS, "this C library has no renameat2", dst)

    monkeypatch.setattr(sockets, "rename_noreplace", no_renameat2)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    with pytest.raises(StartupError) as err:
        bind_unix_socket(server, sock, "--socket")
    server.stop(None).wait()
    assert str(err.value) == (
        f"--socket '{sock}': cannot name the unix socket: the file system has no hard links "
        "(link: operation not permitted) and renaming without replacing failed (renameat2 "
        "RENAME_NOREPLACE: this c library has no renameat2); numamem never renames over a "
        "path that may hold another socket: choose a --socket on another file system (a tmpfs "
        "such as /run)"
    )
    assert os.listdir(os.path.dirname(sock)) == []  # the temporary name is gone too


def test_rename_noreplace_renames_and_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    sockets.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_text() == "a" and not (tmp_path / "a").exists()
    (tmp_path / "c").write_text("c")
    with pytest.raises(FileExistsError):
        sockets.rename_noreplace(str(tmp_path / "c"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_text() == "a" and (tmp_path / "c").read_text() == "c"


def test_grpcio_unlinks_the_path_it_bound_when_it_stops(sock: str) -> None:
    """The upstream fact the temporary name works around (grpcio 1.6x-1.8x): a server bound
    at a path unlinks whatever socket is at that path when it stops, a newcomer's included."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    os.unlink(sock)
    with listener(sock):
        server.stop(None).wait()
        assert not os.path.lexists(sock)


def test_bind_publishes_the_socket_at_its_path_with_mode_0660(sock: str) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    bound = bind_unix_socket(server, sock, "--socket")
    server.start()
    try:
        assert os.listdir(os.path.dirname(sock)) == ["s.sock"]  # the temporary name is gone
        assert (bound.device, bound.inode) == identity(sock)
        assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o660
        assert probe_connect(sock) is None  # served at the final path
    finally:
        server.stop(None).wait()
    assert os.path.lexists(sock)  # grpcio's unlink at stop hit the temporary name
    assert bound.remove() and not os.path.lexists(sock)


def test_remove_leaves_another_socket_at_the_path(sock: str) -> None:
    with listener(sock):
        bound = BoundSocket(sock)
    os.unlink(sock)
    with listener(sock):
        assert not bound.remove()
        assert os.path.lexists(sock)


# --- two daemons with different state dirs and one socket path ---


def config_for(root: Path, sock: str, name: str) -> Config:
    return Config(
        socket=sock,
        state_dir=str(root / name),
        shutdown_grace_seconds=1.0,
        workers=2,
    )


def test_a_second_daemon_on_the_same_socket_refuses_while_the_first_serves(
    short_root: Path, sock: str
) -> None:
    first = Daemon(config_for(short_root, sock, "a"), lambda c: [FakeComponent()], set_umask=False)
    first.start()
    try:
        before = identity(sock)
        second = Daemon(
            config_for(short_root, sock, "b"), lambda c: [FakeComponent()], set_umask=False
        )
        with pytest.raises(StartupError, match="is served by another live process"):
            second.start()
        assert identity(sock) == before
        assert health_status(sock) == health_pb2.HealthCheckResponse.SERVING
    finally:
        first.shutdown()
    assert not os.path.lexists(sock)  # its own socket: removed


def test_a_newcomers_socket_survives_the_old_daemons_shutdown(short_root: Path, sock: str) -> None:
    """An operator removed the first daemon's socket and started a second one (another state
    dir) on the path: stopping the first leaves the second's socket, which grpcio would have
    unlinked at stop and the daemon's own shutdown too."""
    first = Daemon(config_for(short_root, sock, "a"), lambda c: [FakeComponent()], set_umask=False)
    first.start()
    second = Daemon(config_for(short_root, sock, "b"), lambda c: [FakeComponent()], set_umask=False)
    try:
        os.unlink(sock)
        second.start()
        newcomer = identity(sock)
        first.shutdown()
        assert identity(sock) == newcomer
        assert health_status(sock) == health_pb2.HealthCheckResponse.SERVING  # the second's
    finally:
        first.shutdown()
        second.shutdown()
    assert not os.path.lexists(sock)


def assert_a_newcomer_survives(path: str, stop: Callable[[], object]) -> None:
    """Another process's socket bound at ``path`` after ours was unlinked is still there,
    the same inode, after ``stop()``: a stop removes only its own socket."""
    os.unlink(path)
    with listener(path):
        newcomer = identity(path)
        stop()
        assert identity(path) == newcomer


def test_the_podresources_socket_of_a_newcomer_survives_stop(short_root: Path) -> None:
    path = str(short_root / "pr" / "kubelet.sock")

    def no_manager() -> Manager:
        raise AssertionError("no RPC is made")

    component = PodResourcesComponent(path, no_manager)
    component.load()
    component.start()
    try:
        assert_a_newcomer_survives(path, component.stop)
    finally:
        component.stop()


def test_the_metrics_socket_of_a_newcomer_survives_stop(short_root: Path) -> None:
    path = str(short_root / "metrics.sock")
    server = MetricsServer(Metrics(), "127.0.0.1", None, path)
    try:
        assert "# TYPE numamem_rpc_requests_total counter" in scrape_unix(path)
        assert_a_newcomer_survives(path, server.stop)
    finally:
        server.stop()
    again = MetricsServer(Metrics(), "127.0.0.1", None, path)
    again.stop()
    assert not os.path.lexists(path)  # its own socket: removed
