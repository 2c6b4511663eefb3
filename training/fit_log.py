"""The fit's step log: one JSON line per step (`train_log.jsonl`), cut back to a checkpoint's step on resume, and
drawn as a PNG of the loss curves and the learning rate.

    entries = read_log(run_dir / "train_log.jsonl")
    plot_log(entries, run_dir / "loss.png")
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The logged steps; a cut last line (the fit was killed while writing it) is left out."""
    p = Path(path)
    if not p.exists():
        return []
    lines = p.read_bytes().splitlines(keepends=True)
    entries = []
    for number, raw in enumerate(lines, 1):
        try:
            if raw.strip():
                entries.append(json.loads(raw))
        except ValueError:  # not JSON, or not UTF-8
            if number == len(lines) and not raw.endswith(b"\n"):
                log.warning("%s: its last line was cut short (a fit killed while writing it); left out", p)
                break
            raise
    return entries


def truncate_log(path: Path, step: int) -> None:
    """Keep the steps up to `step` (a resumed checkpoint's), written whole or not at all."""
    from data.paths import write_text_atomic

    if path.exists():
        kept = [e for e in read_log(path) if e["step"] <= step]
        write_text_atomic(path, "".join(json.dumps(e) + "\n" for e in kept))


def plot_log(entries: Sequence[dict[str, Any]], path: str | Path) -> str | None:
    """Loss curves (raw and smoothed, total and per kind) and the learning rate as one PNG."""
    if not entries:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no loss plot (pip install 'jevmem-local[eval]')")
        return None
    steps = np.array([e["step"] for e in entries])
    fig, (ax, ax_lr) = plt.subplots(1, 2, figsize=(11, 4))
    for key in ("loss", "noul", "choice", "score"):
        pts = [(e["step"], e[key]) for e in entries if key in e]
        if not pts:
            continue
        x, y = np.array(pts).T
        ax.plot(x, _ema(y), label=f"{key} (EMA)", linewidth=1.5 if key == "loss" else 1.0)
        if key == "loss":
            ax.plot(x, y, alpha=0.2, color="grey", linewidth=0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    ax.grid(alpha=0.3)
    ax_lr.plot(steps, [e["lr"] for e in entries])
    ax_lr.set_xlabel("step")
    ax_lr.set_ylabel("LoRA learning rate")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    from data.paths import replacing

    try:
        with replacing(path) as tmp:  # beside it, same suffix (the format): the old plot or the new one, whole
            fig.savefig(str(tmp), dpi=90)
    finally:
        plt.close(fig)
    return str(path)


def _ema(values: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    out = np.empty_like(values, dtype=np.float64)
    acc = float(values[0])
    for i, v in enumerate(values):
        acc = alpha * float(v) + (1 - alpha) * acc if i else acc
        out[i] = acc
    return out


__all__ = ["plot_log", "read_log", "truncate_log"]
