"""Every file a later stage (or a reader of a run) takes as whole is written whole: beside its target and renamed
over it (`data.paths.replacing`, `write_text_atomic`), or into a staged directory swapped in whole
(`data.paths.staged`). This test reads the sources of `training/` and `data/` for writers that write a file in
place, so that a new one is either made atomic or listed here with the reason it may write in place."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITER = re.compile(r"\.write_text\(|\.write_bytes\(|\bopen\([^)]*[\"'][wax]b?\+?[\"']|\.open\([\"'][wax]|\.savefig\(|torch\.save\(|"
                    r"\bsave_file\(|json\.dump\(|\.to_csv\(|\.save_pretrained\(")
# (file, a piece of the line): where an in-place write is the design
IN_PLACE = {
    ("data/paths.py", "tmp.write_text("): "the atomic writer itself, into its temporary file",
    ("data/paths.py", "fig.savefig(tmp)"): "the module docstring's example of `replacing`",
    ("data/schema.py", 'path.open("a" if append else "w"'): "write_jsonl: into a staged directory, or an append that drops a torn tail",
    ("data/schema.py", "(stage / name).write_text("): "write_splits: into its staged directory",
    ("training/checkpoints.py", "torch.save("): "into a .tmp file, fsynced and renamed over the checkpoint",
    ("training/trainer.py", 'log_path.open("a"'): "the step log is appended; a torn last line is dropped on resume",
    ("training/embedder.py", "model.save_pretrained(str(stage), save_embedding_layers=False)"): "into a staged directory",
    ("training/embedder.py", "(stage / SUMMARY_FILE).write_text("): "into a staged directory",
    ("training/embedder.py", "config_file.write_text("): "rewrites a file of the staged directory",
    ("training/evaluate.py", "fig.savefig(str(tmp)"): "into `replacing`'s temporary path",
    ("training/fit_log.py", "fig.savefig(str(tmp)"): "into `replacing`'s temporary path",
    ("training/ood.py", 'open(log_path, "wb")'): "the server's own log, read by no stage",
}


def test_no_file_is_written_in_place_but_those_listed() -> None:
    found, used = [], set()
    for path in sorted([*ROOT.glob("training/**/*.py"), *ROOT.glob("data/**/*.py")]):
        name = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not WRITER.search(line) or line.lstrip().startswith("#"):
                continue
            allowed = [key for key in IN_PLACE if key[0] == name and key[1] in line]
            used.update(allowed)
            if not allowed:
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == [], "files written in place (use data.paths.replacing / write_text_atomic / staged):\n" + "\n".join(found)
    assert used == set(IN_PLACE), f"listed writers no longer found: {sorted(set(IN_PLACE) - used)}"
