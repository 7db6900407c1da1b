"""The pod names file (``numamem_pod_names``): a name costs an append, and every restart pairs
a state with the names of the same commit, in order, whatever failed before."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numamem.checkpoint import namesfile
from numamem.checkpoint.containerfile import encode_containers, read_container_file
from numamem.checkpoint.fs import FileSystem
from numamem.checkpoint.mmstore import CONTAINERS_FILE, STATE_FILE, KubeletStateStore
from numamem.checkpoint.namesfile import NAMES_FILE, encode_names, read_names
from numamem.checkpoint.records import frame
from numamem.errors import PersistenceError
from numamem.memorymanager.manager.writes import Manager
from numamem.memorymanager.policy.static import StaticPolicy
from numamem.pod import Pod
from numamem.topology import Machine
from numamem.topologymanager.policy import new_policy
from tests.properties import examples
from tests.unit.test_memorymanager import MI, ctr, two_nodes


class Counting(FileSystem):
    """The real file system, counting each operation by the file it touches."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []
        self._fds: dict[int, str] = {}

    def open(self, path: object, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)  # type: ignore[arg-type]
        self._fds[fd] = Path(str(path)).name
        self.ops.append(("open", self._fds[fd]))
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.ops.append(("write", self._fds.get(fd, "?")))
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.ops.append(("fsync", self._fds.get(fd, "?")))
        super().fsync(fd)

    def replace(self, src: object, dst: object) -> None:
        self.ops.append(("rename", Path(str(dst)).name))
        super().replace(src, dst)  # type: ignore[arg-type]


class Named(Manager):
    store: KubeletStateStore


def unstarted(directory: Path, machine: Machine | None = None, **store: object) -> Named:
    """A manager recording pod names on a store in ``directory`` (two nodes by default),
    not started."""
    machine = machine or two_nodes()
    files = KubeletStateStore(directory, **store)  # type: ignore[arg-type]
    m = Named(
        StaticPolicy(machine, {0: {"memory": 512 * MI}}),
        files,
        new_policy("none", machine)[0],
        "container",
        record_pod_names=True,
    )
    m.store = files
    return m


def manager(directory: Path, machine: Machine | None = None, **store: object) -> Named:
    """:func:`unstarted`, started."""
    m = unstarted(directory, machine, **store)
    m.start()
    return m


def named(uid: str, name: str | None = None, size: int = 64 * MI) -> Pod:
    name = f"web-{uid}" if name is None else name
    return Pod(uid, "shop" if name else "", name, containers=(ctr("a", size),))


def restart_names(directory: Path) -> list[tuple[str, tuple[str, str]]]:
    return list(manager(directory).pod_names().items())


def test_naming_a_pod_appends_one_record_and_writes_no_other_file(tmp_path: Path) -> None:
    fs = Counting()
    m = manager(tmp_path, fs=fs)
    assert m.admit(named("u1")).result.admitted  # the first name creates the file (a fold)
    fs.ops.clear()
    assert m.admit(named("u2")).result.admitted
    names_ops = [op for op, name in fs.ops if name == NAMES_FILE]
    assert names_ops == ["write", "fsync"]  # one append on the open descriptor, one fsync
    assert not [op for op in fs.ops if op[1] == CONTAINERS_FILE]
    assert ("rename", STATE_FILE) in fs.ops
    assert m.store.names_file.appends == 1 and m.store.names_file.folds == 1
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("u2", ("shop", "web-u2"))]


def test_a_release_writes_no_name_and_the_name_stays_inert(tmp_path: Path) -> None:
    m = manager(tmp_path)
    for uid in ("u1", "u2", "u3"):
        assert m.admit(named(uid)).result.admitted
    before = (tmp_path / NAMES_FILE).read_bytes()
    m.release_pod("u2")
    assert (tmp_path / NAMES_FILE).read_bytes() == before
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("u3", ("shop", "web-u3"))]


def test_a_pod_keeps_the_name_of_the_commit_that_gave_it_state(tmp_path: Path) -> None:
    m = manager(tmp_path)
    assert m.admit(named("u1", "first")).result.admitted
    assert m.admit(named("u1", "second")).result.admitted  # a uid's name never changes
    assert m.admit(named("u2", "")).result.admitted  # state without a name
    assert m.admit(named("u2", "later")).result.admitted  # stays unnamed while it has state
    assert m.pod_names() == {"u1": ("shop", "first")}
    assert restart_names(tmp_path) == [("u1", ("shop", "first"))]


def test_a_released_pod_admitted_again_without_a_name_does_not_get_its_old_one(
    tmp_path: Path,
) -> None:
    m = manager(tmp_path)
    assert m.admit(named("u1")).result.admitted
    assert m.admit(named("x")).result.admitted
    m.release_pod("x")
    folds = m.store.names_file.folds
    assert m.admit(named("x", "")).result.admitted
    assert m.store.names_file.folds == folds + 1
    assert m.pod_names() == {"u1": ("shop", "web-u1")}
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]
    m.release_pod("x")
    assert m.admit(named("x", "again")).result.admitted  # named again: last
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("x", ("shop", "again"))]


def test_the_file_is_folded_when_its_records_outgrow_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(namesfile, "FOLD_MIN_BYTES", 200)
    m = manager(tmp_path)
    sizes = []
    for i in range(60):
        assert m.admit(named(f"p{i}")).result.admitted
        if i >= 2:
            m.release_pod(f"p{i - 2}")  # two pods live at a time
        sizes.append((tmp_path / NAMES_FILE).stat().st_size)
    assert m.store.names_file.folds > 3
    assert max(sizes) < 2 * 200 + 3 * len(encode_names({"p00": ("shop", "web-p00")}) * 3)
    assert restart_names(tmp_path) == [("p58", ("shop", "web-p58")), ("p59", ("shop", "web-p59"))]


def test_a_torn_last_record_is_dropped_and_the_next_name_rewrites_the_file(
    tmp_path: Path,
) -> None:
    m = manager(tmp_path)
    assert m.admit(named("u1")).result.admitted
    with open(tmp_path / NAMES_FILE, "ab") as f:
        f.write(frame(b'["u2","shop","web-u2"]')[:-7])  # a crash during an append
    again = manager(tmp_path)
    assert again.pod_names() == {"u1": ("shop", "web-u1")}
    assert again.admit(named("u3")).result.admitted
    assert again.store.names_file.folds == 1
    found = read_names((tmp_path / NAMES_FILE).read_bytes(), tmp_path)
    assert (found.torn, found.damage) == (0, None)
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("u3", ("shop", "web-u3"))]


def test_a_damaged_file_is_set_aside_keeping_the_names_before_the_damage(
    tmp_path: Path,
) -> None:
    m = manager(tmp_path)
    for uid in ("u1", "u2", "u3"):
        assert m.admit(named(uid)).result.admitted
    data = bytearray((tmp_path / NAMES_FILE).read_bytes())
    second = data.index(b'"u2"')
    data[second + 1] = ord("X")  # the u2 record's checksum fails; u3's follows it
    (tmp_path / NAMES_FILE).write_bytes(bytes(data))
    again = manager(tmp_path)
    assert again.pod_names() == {"u1": ("shop", "web-u1")}  # u2 and u3: listed by uid
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(NAMES_FILE + ".corrupt-")]
    assert again.admit(named("u4")).result.admitted
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1")), ("u4", ("shop", "web-u4"))]


def test_names_of_an_older_container_map_move_to_the_names_file(tmp_path: Path) -> None:
    m = manager(tmp_path)
    for uid in ("u1", "u2"):
        assert m.admit(named(uid)).result.admitted
    (tmp_path / NAMES_FILE).unlink()  # as an older numamem left it: names in the map
    legacy = {"u2": ("shop", "web-u2"), "u1": ("shop", "web-u1")}
    (tmp_path / CONTAINERS_FILE).write_bytes(encode_containers({}, legacy))
    again = manager(tmp_path)
    assert list(again.pod_names().items()) == list(legacy.items())
    assert again.admit(named("u3")).result.admitted
    assert read_container_file((tmp_path / CONTAINERS_FILE).read_bytes()).names == {}
    assert restart_names(tmp_path) == [*legacy.items(), ("u3", ("shop", "web-u3"))]


def test_the_file_reader_tells_the_header_damage_and_a_torn_tail_apart(tmp_path: Path) -> None:
    good = encode_names({"a": ("ns", "x"), "b": ("ns", "y")})
    assert read_names(good, tmp_path).names == {"a": ("ns", "x"), "b": ("ns", "y")}
    assert read_names(good + b"0000", tmp_path).torn == 4
    replayed = good + frame(b'["a","ns","z"]')
    assert list(read_names(replayed, tmp_path).names.items()) == [("b", ("ns", "y")), ("a", ("ns", "z"))]  # fmt: skip
    assert read_names(frame(b'["a","ns","x"]'), tmp_path).damage is not None
    assert read_names(good + frame(b'["a","ns"]'), tmp_path).damage is not None
    assert read_names(good + frame(b"not json"), tmp_path).damage is not None


def failing(once: dict[str, tuple[str, str]]) -> object:
    """A fault hook that fails each (stage, file) in ``once`` the next time, then never."""

    def hook(stage: str, target: Path) -> None:
        for key, (want_stage, want_file) in list(once.items()):
            if (stage, target.name) == (want_stage, want_file):
                del once[key]
                raise OSError(errno.EIO, "injected")

    return hook


def failed_named_admission(directory: Path, fault: tuple[str, str]) -> Named:
    """A manager on ``directory`` that admitted u1 with its name, then failed to admit x
    with its name: the save failed at ``fault`` (stage, file name) and raised."""
    faults: dict[str, tuple[str, str]] = {}
    m = manager(directory, faults=failing(faults))
    assert m.admit(named("u1")).result.admitted
    faults["x"] = fault
    with pytest.raises(PersistenceError):
        m.admit(named("x"))
    return m


def test_a_name_appended_for_a_change_that_failed_never_names_the_pod_later(
    tmp_path: Path,
) -> None:
    """The record reached the file but the state's write failed: the pod has no state, so the
    name is inert; when the pod later gets state without a name, the file is rewritten first."""
    m = failed_named_admission(tmp_path, ("rename", STATE_FILE))
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]
    assert m.admit(named("x", "")).result.admitted
    assert m.pod_names() == {"u1": ("shop", "web-u1")}
    assert restart_names(tmp_path) == [("u1", ("shop", "web-u1"))]


def test_a_fold_whose_state_write_fails_keeps_the_old_names_in_their_order(
    tmp_path: Path,
) -> None:
    faults: dict[str, tuple[str, str]] = {}
    m = manager(tmp_path, faults=failing(faults))
    for uid in ("a", "b", "c"):
        assert m.admit(named(uid)).result.admitted
    faults["append"] = ("append-fsync", NAMES_FILE)
    with pytest.raises(PersistenceError):
        m.admit(named("d"))  # the next save folds
    faults["state"] = ("rename", STATE_FILE)
    with pytest.raises(PersistenceError):
        m.release_pod("b")  # the fold (with b still in it) is renamed, the state is not
    order = [("a", ("shop", "web-a")), ("b", ("shop", "web-b")), ("c", ("shop", "web-c"))]
    assert list(m.pod_names().items()) == order
    assert restart_names(tmp_path) == order
    m.release_pod("b")
    assert restart_names(tmp_path) == [order[0], order[2]]


# --- every failure, then a restart -----------------------------------------------------

STAGES = ("open", "append", "append-fsync", "write", "fsync", "rename", "dirsync")
OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "admit-nameless", "release", "allocate"]),
        st.integers(0, 5),
        st.one_of(
            st.none(), st.tuples(st.sampled_from(STAGES), st.sampled_from([NAMES_FILE, STATE_FILE]))
        ),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_after_any_sequence_and_any_failed_write_a_restart_reads_memorys_names(
    ops: list[tuple[str, int, tuple[str, str] | None]],
) -> None:
    """Admissions with and without names, releases and allocations, each possibly failing at
    one stage of the names file's or the state's write: after each, a restart reads the same
    names in the same order as memory (names of pods without state left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        fault: list[tuple[str, str] | None] = [None]

        def hook(stage: str, target: Path) -> None:
            if fault[0] is not None and fault[0] == (stage, target.name):
                fault[0] = None
                raise OSError(errno.EIO, "injected")

        m = manager(directory, faults=hook)
        for kind, n, failure in ops:
            uid = f"p{n}"
            fault[0] = failure
            try:
                if kind == "admit":
                    m.admit(named(uid, f"name-{n % 3}"))
                elif kind == "admit-nameless":
                    m.admit(named(uid, ""))
                elif kind == "allocate":
                    m.allocate(named(uid, f"other-{n}"), "a")
                else:
                    m.release_pod(uid)
            except PersistenceError:
                pass
            fault[0] = None
            state = m.committed().view.get_memory_assignments()
            memory = [(u, v) for u, v in m.pod_names().items() if u in state]
            restarted = manager(directory)
            assert list(restarted.pod_names().items()) == memory
            assert restarted.committed().view.get_memory_assignments() == state
            restarted.store.close()
        m.store.close()
        assert not [f for f in os.listdir(directory) if ".tmp-" in f]


def test_a_save_that_removes_one_name_and_adds_another_keeps_the_removed_one_inert(
    tmp_path: Path,
) -> None:
    """The journal's own bookkeeping: a uid whose name left memory in a save that also named
    another pod is still known inert, so it getting state later without a name folds."""
    journal = namesfile.NamesJournal(tmp_path)
    a, b = {"a": ("ns", "a")}, {"b": ("ns", "b")}
    plan = journal.plan({}, a, {"a"})
    assert plan is not None and plan[0] == "fold"  # no file yet
    (tmp_path / NAMES_FILE).write_bytes(plan[1])
    journal.folded(plan[1], {}, a, renamed=True)
    plan = journal.plan(a, b, {"b"})
    assert plan == ("append", frame(b'["b","ns","b"]'))
    journal.append(plan[1])
    journal.saved(a, b, applied=True)
    plan = journal.plan(b, b, {"a", "b"})  # "a" gets state again, without a name
    assert plan is not None and plan[0] == "fold"
    assert read_names(plan[1], tmp_path).names == b
    journal.close()
