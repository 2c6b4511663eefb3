"""Atomic writes: every file the controller saves is written beside its name and renamed into place, so a write
that dies midway leaves the old file (or none) and no temporary, never a cut file under the real name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from controller.artifacts import ArtifactMeta, artifact_hash, load_artifact, save_artifact
from controller.calibration import Calibration, save_calibration
from controller.errors import ArtifactError
from controller.files import atomic_directory, atomic_file, write_bytes_atomic
from controller.states import StateConventions, write_states


class Killed(BaseException):
    """Stands in for the process dying at that point (not an `Exception`: nothing may swallow it)."""


def _kill_at_replace(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The `n`-th `os.replace` from now never happens: the writer dies just before it."""
    real, calls = os.replace, [0]

    def replace(src, dst):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == n:
            raise Killed(f"killed before renaming {src} onto {dst}")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_bytes(b"half of the new")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["f.json"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0600: the serving account reads it


def test_a_directory_lands_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "adapter"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "a.json").write_text("{}")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(target) as tmp:
        (tmp / "a.json").write_text("{}")
        assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"] and (target / "a.json").read_text() == "{}"
    assert target.stat().st_mode & 0o777 == 0o777 & ~_umask()


def _write_index(root: Path) -> None:
    from controller.specialists import write_index

    write_index(root, {"relevance": "specialists/relevance"})


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("states.json", lambda root: write_states(root, StateConventions(relevance_dated=True))),
        ("calibration.json", lambda root: save_calibration(Calibration({"noul": 2.0}, "h"), root / "calibration.json")),
        ("specialists.json", _write_index),
    ],
)
def test_each_small_writer_is_atomic(tiny_artifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, write) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "m"
    shutil.copytree(tiny_artifact, root)
    shutil.copytree(tiny_artifact, root / "specialists" / "relevance")
    (root / name).write_text("old")
    before = _files(root)
    with monkeypatch.context() as mp:
        _kill_at_replace(mp, 1)
        with pytest.raises(Killed):
            write(root)
    assert _files(root) == before  # the old file as it was, and no temporary beside it
    write(root)
    assert json.loads((root / name).read_text())


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_a_save_killed_at_any_point_leaves_no_cut_file_and_nothing_a_load_accepts_but_a_whole_model(
    tiny_base_dir: Path, tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str  # type: ignore[no-untyped-def]
) -> None:
    from controller.artifacts import add_lora
    from controller.torch_model import PackedCrossEncoder

    def model(seed: int) -> PackedCrossEncoder:
        if kind == "lora":
            return add_lora(PackedCrossEncoder.from_base(tiny_base_dir, seed=seed))
        return PackedCrossEncoder.from_config(tiny_config, seed=seed)

    models = {seed: model(seed) for seed in (0, 7)}  # once each: a LoRA adapter starts from global-RNG weights

    def save(seed: int, out: Path) -> str:
        return save_artifact(models[seed], out, ArtifactMeta(name="m", version=str(seed)), base_path=tiny_base_dir)

    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    hashes = {save(0, old_dir), save(7, new_dir)}
    versions = [_files(old_dir), _files(new_dir)]
    for n in range(1, 20):
        out = tmp_path / f"killed-{n}"
        shutil.copytree(old_dir, out)
        with monkeypatch.context() as mp:
            _kill_at_replace(mp, n)
            try:
                save(7, out)
            except Killed:
                pass
            else:  # every write of the save happened
                break
        for rel, data in _files(out).items():  # each file is one save's version, whole
            assert any(v.get(rel) == data for v in versions), (n, rel)
        try:
            loaded = load_artifact(out, base_path=tiny_base_dir)
        except ArtifactError:
            continue  # a mix of old and new files: refused
        assert loaded.model_hash in hashes and loaded.calibration.model_hash == loaded.model_hash
    else:
        pytest.fail("the save never completed")
    assert n > 5  # the weights, heads, config, calibration, metrics and card were each a rename


def test_temporaries_a_killed_process_leaves_are_outside_the_hash(tiny_artifact: Path, tmp_path: Path) -> None:
    root = tmp_path / "m"
    shutil.copytree(tiny_artifact, root)
    before = artifact_hash(root)
    (root / "heads.safetensors.0123abcd.tmp").write_bytes(b"cut")
    (root / "adapter.0123abcd.tmp").mkdir()
    (root / "adapter.0123abcd.tmp" / "adapter_model.safetensors").write_bytes(b"cut")
    assert artifact_hash(root) == before and load_artifact(root).model_hash == before


def test_a_saved_adapter_holds_only_the_artifact_files(tiny_base_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """peft writes a template README.md beside the adapter; the model card is MODEL_CARD.md, so none is left."""
    from controller.artifacts import ArtifactMeta, add_lora, save_artifact
    from controller.torch_model import PackedCrossEncoder

    model = add_lora(PackedCrossEncoder.from_base(tiny_base_dir, seed=0))
    save_artifact(model, tmp_path / "m", ArtifactMeta(name="tiny", version="0.0.1"), base_path=tiny_base_dir)
    assert sorted(p.name for p in (tmp_path / "m" / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
