"""`data.paths.staged` under concurrency and failed swaps: two processes writing one directory take turns (no
lost update, no copy of a running block removed), a nested block is refused instead of deadlocking, and a swap
the system refuses (a mount point, EBUSY) is a `StagingError` with the directory as it was and no copy left."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import data.paths
from data.errors import BusyError, DataError, StagingError
from data.paths import replacing, staged, unreplaceable

ROOT = Path(__file__).resolve().parents[2]

# a second process: one staged block that adds a file, after a signal file appears (so the test knows it started)
WRITER = """
import sys, time
from pathlib import Path
from data.paths import staged
target, name, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
with staged(target) as stage:
    (stage / name).write_text(name, encoding="utf-8")
    (target.parent / f"started-{name}").touch()
    time.sleep(hold)
"""


def _writer(target: Path, name: str, hold: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(target), name, str(hold)], env=env, cwd=ROOT,
                            stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen[bytes]) -> str:
    """Wait for a writer; its stderr (the pipe closed), after checking it exited 0."""
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode()
    return err.decode()


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _leftovers(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}."))


def test_two_processes_staging_one_directory_take_turns_and_lose_no_update(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "base.txt").write_text("base", encoding="utf-8")
    first = _writer(target, "a.txt", hold=1.5)
    _wait_for(tmp_path / "started-a.txt")  # the first block holds the lock and its copy exists
    second = _writer(target, "b.txt", hold=0.0)
    time.sleep(0.5)  # the second is waiting: it must neither copy yet nor remove the first one's copy
    assert not (tmp_path / "started-b.txt").exists()
    assert any(".staging-" in name for name in _leftovers(target))
    _finish(first)
    waited = _finish(second)
    # the second block copied what the first swapped in: both files, not the second's copy of the old directory
    assert sorted(p.name for p in target.iterdir()) == ["a.txt", "b.txt", "base.txt"]
    assert _leftovers(target) == []
    assert "another process is writing it; waiting" in waited


def test_threads_of_one_process_take_turns_too(tmp_path: Path) -> None:
    target = tmp_path / "model"
    order: list[str] = []

    def block(name: str, hold: float) -> None:
        with staged(target) as stage:
            order.append(f"start {name}")
            (stage / name).write_text(name, encoding="utf-8")
            time.sleep(hold)
            order.append(f"end {name}")

    one = threading.Thread(target=block, args=("a", 0.4))
    one.start()
    while not order:
        time.sleep(0.01)
    two = threading.Thread(target=block, args=("b", 0.0))
    two.start()
    one.join(10)
    two.join(10)
    assert order == ["start a", "end a", "start b", "end b"]
    assert sorted(p.name for p in target.iterdir()) == ["a", "b"]


def test_a_nested_block_on_the_same_directory_is_refused_not_deadlocked(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with staged(target) as outer:
        (outer / "x").write_text("x", encoding="utf-8")
        with pytest.raises(BusyError, match="already held by this thread"):
            with staged(target):
                pass
    assert (target / "x").read_text(encoding="utf-8") == "x"
    with staged(target / "inner"):  # a directory inside is another target: allowed
        pass


def test_recover_waits_for_a_running_block_and_keeps_its_copy(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    writer = _writer(target, "a.txt", hold=1.0)
    _wait_for(tmp_path / "started-a.txt")
    data.paths.recover(target)  # blocks until the writer's swap, then finds nothing to undo
    _finish(writer)
    assert (target / "a.txt").read_text(encoding="utf-8") == "a.txt"
    assert _leftovers(target) == []


def test_a_swap_the_system_refuses_is_a_staging_error_and_leaves_everything_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old", encoding="utf-8")

    def busy(a: Path, b: Path) -> bool:  # what renameat2 says of a mount point
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(a), None, str(b))

    monkeypatch.setattr(data.paths, "_exchange", busy)
    with pytest.raises(StagingError, match="could not be replaced") as caught:
        with staged(target) as stage:
            (stage / "new.txt").write_text("new", encoding="utf-8")
    assert isinstance(caught.value, OSError) and isinstance(caught.value, DataError)
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.EBUSY
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    assert _leftovers(target) == []


def test_an_error_inside_the_block_is_not_wrapped(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with pytest.raises(PermissionError):  # the block's own failure, as raised
        with staged(target):
            raise PermissionError("disk said no")
    assert not target.exists() and _leftovers(target) == []


def test_a_mount_point_is_named_as_unreplaceable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out"
    target.mkdir()
    assert unreplaceable(target) is None
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == target)
    problem = unreplaceable(target)
    assert problem is not None and "mount point" in problem and "inside it" in problem
    assert unreplaceable(target / "inner") is None


def test_replacing_gives_each_writer_its_own_temporary_path(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    with replacing(path) as first, replacing(path) as second:  # two writers of one path in one process
        assert first != second and first.parent == second.parent == tmp_path
        assert first.suffix == second.suffix == ".json" and str(os.getpid()) in first.name
        first.write_text("1", encoding="utf-8")
        second.write_text("2", encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "1"  # the outer block ended last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_directory_whose_parents_do_not_exist_yet_is_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "model"
    with staged(target) as stage:
        (stage / "x").write_text("x", encoding="utf-8")
    assert (target / "x").read_text(encoding="utf-8") == "x"


def test_a_path_with_dot_dot_replaces_the_directory_it_means_never_a_copy_inside_itself(tmp_path: Path) -> None:
    # before: the copy of `a/b/..` was made at `a/b/../.<..>.staging-N`, inside the tree being copied, without end
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "old.txt").write_text("old", encoding="utf-8")
    with staged(tmp_path / "a" / "b" / "..") as stage:
        assert stage.parent == tmp_path
        (stage / "new.txt").write_text("new", encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b", "new.txt", "old.txt"]
    assert _leftovers(tmp_path / "a") == []


def test_the_working_directory_or_one_that_holds_it_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = tmp_path / "out" / "inner"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    for given in (Path("."), Path(".."), inner):
        problem = unreplaceable(given)
        assert problem is not None and "working directory" in problem, given
        with pytest.raises(StagingError, match="working directory"):
            with staged(given):
                pass
    assert unreplaceable(tmp_path / "beside") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and inner.is_dir()


def test_build_data_refuses_the_working_directory_before_it_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from training.__main__ import main

    monkeypatch.chdir(tmp_path)
    code = main(["build-data", "--out", ".", "--dense", "hashing", "--synthetic-per-family", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "working directory" in err and list(tmp_path.iterdir()) == []
