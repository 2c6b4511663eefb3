"""Fine-tuning: LoRA on the encoder, fully trained heads, AdamW with linear warmup / decay, resumable.

    model = PackedCrossEncoder.from_base(base)                   # or .from_config(...) in tests
    result = fit(model, requests, FitConfig(steps=1500), run_dir="runs/x")
    result = fit(fresh_model, requests, same_config, run_dir="runs/x", resume=True)   # same weights

Every step is a pure function of (seed, step): the sampler draws the step's requests from (seed, step),
dropout is reseeded from (seed, step) and the learning rate is a function of the step, so resuming from a
checkpoint (trainable weights + AdamW state) reproduces the uninterrupted run; a checkpoint of another
configuration or of other training data is refused. The log is JSONL (one line per step) plus a PNG of the
loss curves; checkpoints go to `run_dir/checkpoints/` (never into a model dir); a fresh run removes earlier ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from data.paths import write_text_atomic
from training.checkpoints import checkpoint_dir, clear_checkpoints, data_fingerprint, latest_checkpoint, resume_checkpoint, save_checkpoint
from training.errors import CheckpointError, DeviceError, FitInterrupted
from training.fit_log import plot_log, read_log, truncate_log
from training.sampling import BalancedSampler, LabeledRequest, collate, label_tensors

log = logging.getLogger(__name__)

DROPOUT_KINDS = ("fast", "torch")
PRECISIONS = ("fp32", "bf16")
_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


# FitConfig fields a resumed fit may change: they do not change the weights a step computes.
RUNTIME_KNOBS: tuple[str, ...] = ("threads", "checkpoint_every", "keep_checkpoints", "max_minutes", "device")


@dataclass(frozen=True)
class FitConfig:
    steps: int = 900  # ~2.7M packed tokens; `make train` plans 520 (capped at 26 min) plus a relevance specialist (docs/EXPERIMENTS.md)
    tokens_per_step: int = 3000  # packed (unpadded) tokens drawn per optimizer step (~45 labels)
    max_batch_tokens: int = 8192  # padded tokens per micro-batch (gradients accumulate over a step)
    lr: float = 1e-3  # LoRA parameters
    head_lr: float = 3e-3  # readout heads (fully trained)
    weight_decay: float = 0.01
    warmup: float = 0.05  # share of steps with a linear warmup; linear decay to 0 afterwards
    grad_clip: float = 1.0
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.1
    lora_layers: int = 0  # LoRA on the top N encoder layers only (0: all); the layers below then need no backward pass
    attention_dropout: float = 0.0  # attention-probability dropout while training; on CPU it costs ~40% of a step
    dropout: str = "fast"  # hidden and LoRA dropout masks: "fast" (training.dropout, same distribution) or "torch" (nn.Dropout)
    # "bf16": forward passes under bfloat16 autocast (weights, AdamW state, loss and gradients stay float32);
    # meant for accelerators with native bf16; inside fit() on the 2-core AVX512-BF16 CPU four same-run comparisons
    # gave 0.89x to 1.25x the fp32 step time, no consistent gain, so the recipe stays fp32 (docs/EXPERIMENTS.md,
    # row "bf16 autocast in the fit")
    precision: str = "fp32"
    family_power: float = 0.5  # family-balanced sampling (see BalancedSampler)
    family_boost: str = ""  # extra share factors, "relevance=1.7,pair=1.2" (see BalancedSampler and boost_factors)
    npair_fraction: float = 0.1  # share of requests trained as N-pair rows (same weights), for the comparison
    rps_weight: float = 1.0  # Score loss: cross-entropy + rps_weight * RPS
    # > 0: steps draw a relevance query's candidates together and add this times the listwise loss of
    # `relevance.relevant` over them (training.losses.ListwiseLoss); 0: pointwise only
    listwise_weight: float = 0.0
    seed: int = 0
    threads: int = 2
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    max_minutes: float = 0.0  # > 0: stop (with a checkpoint) after this wall-clock; the schedule stays as planned
    device: str = "auto"  # "auto" (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N"; a run-time knob like threads

    def __post_init__(self) -> None:
        for f in fields(self):  # NaN passes every comparison below; an infinite rate or weight fits NaN weights
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"FitConfig.{f.name} must be a finite number, got {value}")
        positive = ("steps", "tokens_per_step", "max_batch_tokens", "lora_r", "lora_alpha", "threads", "checkpoint_every", "keep_checkpoints")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"FitConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "head_lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FitConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("warmup", "lora_dropout", "attention_dropout", "family_power", "npair_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"FitConfig.{name} must lie in [0, 1], got {getattr(self, name)}")
        for name in ("lora_dropout", "attention_dropout"):  # 1 zeroes every activation: the fit's dropout refused it, a traceback
            if getattr(self, name) == 1.0:
                raise ValueError(f"FitConfig.{name} must be < 1 (1 drops every activation), got {getattr(self, name)}")
        if self.lora_layers < 0:
            raise ValueError(f"FitConfig.lora_layers must be >= 0 (0: every layer), got {self.lora_layers}")
        for name in ("weight_decay", "rps_weight", "listwise_weight", "max_minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"FitConfig.{name} must be >= 0, got {getattr(self, name)}")
        boost_factors(self.family_boost)  # raises ValueError on a malformed spec
        if not _DEVICE.fullmatch(self.device):
            raise ValueError(f"FitConfig.device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.dropout not in DROPOUT_KINDS:
            raise ValueError(f"FitConfig.dropout must be one of {', '.join(DROPOUT_KINDS)}, got {self.dropout!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"FitConfig.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FitConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def fingerprint(self) -> str:
        """What a checkpoint must agree on to be resumed (run-time knobs excluded)."""
        keep = {k: v for k, v in asdict(self).items() if k not in RUNTIME_KNOBS}
        if not keep["family_boost"]:  # added later: runs without a boost keep the fingerprint they had
            del keep["family_boost"]
        if keep["dropout"] == "torch":  # added later: runs from before it keep their fingerprint
            del keep["dropout"]
        if not keep["lora_layers"]:  # added later, likewise
            del keep["lora_layers"]
        if keep["precision"] == "fp32":  # added later, likewise
            del keep["precision"]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]

    def changes_from(self, recorded: FitConfig) -> str:
        """The settings that make this configuration's fingerprint differ from `recorded`'s, as
        `FitConfig.lr 0.002 (was 0.001)` (the command line names the flags); "" when none does."""
        if self.fingerprint() == recorded.fingerprint():
            return ""
        return ", ".join(f"FitConfig.{f.name} {getattr(self, f.name)!r} (was {getattr(recorded, f.name)!r})" for f in fields(self)
                         if f.name not in RUNTIME_KNOBS and getattr(self, f.name) != getattr(recorded, f.name))


def resolve_device(name: str) -> Any:
    """The torch device of a `FitConfig.device` name (`controller.torch_model.torch_device`); ValueError when
    CUDA is asked for and torch sees no GPU (`DeviceError`, a `TrainingError`: the command line's message)."""
    from controller.errors import BackendUnavailableError
    from controller.torch_model import torch_device

    try:
        return torch_device(name)
    except BackendUnavailableError as error:
        raise DeviceError(str(error)) from error


def native_bf16(device: Any) -> bool:
    """Whether `device` runs bfloat16 matrix products natively (CUDA: compute capability 8+, CPU: oneDNN's
    AVX512-BF16 / AMX check); without it bf16 autocast is emulated and slower than float32."""
    import torch

    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _autocast(config: FitConfig, device: Any) -> Any:
    import torch

    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")


def boost_factors(spec: str) -> dict[str, float]:
    """`"relevance=1.7,pair=1.2"` -> {"relevance": 1.7, "pair": 1.2}; an empty spec boosts nothing."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        try:
            factor = float(value)
        except ValueError as error:
            raise ValueError(f"family_boost wants name=factor pairs, got {part!r}") from error
        if not sep or not name.strip() or not factor > 0 or factor == float("inf"):
            raise ValueError(f"family_boost wants name=factor pairs with factor > 0, got {part!r}")
        out[name.strip()] = factor
    return out


@dataclass(frozen=True)
class FitResult:
    steps_done: int
    completed: bool  # False when stopped early by max_minutes
    seconds: float
    final_loss: float  # mean loss over the last 50 logged steps
    first_loss: float  # mean loss over the first 50 logged steps
    trainable_parameters: int
    total_parameters: int
    tokens_seen: int
    labels_seen: int
    resumed_from: int
    log_path: str
    plot_path: str | None


def lr_factor(step: int, config: FitConfig) -> float:
    """Linear warmup over `warmup * steps`, then linear decay to 0 at `steps` (step counts from 1)."""
    warm = max(1, int(round(config.warmup * config.steps)))
    if step <= warm:
        return step / warm
    return max(0.0, (config.steps - step) / max(1, config.steps - warm))


def prepare_model(model: Any, config: FitConfig) -> Any:
    """Add the LoRA adapter (r, alpha, dropout on query/key/value/dense); heads stay fully trainable.
    With `dropout="fast"` every dropout module then draws cheap masks (`training.dropout`)."""
    from controller.artifacts import add_lora

    model = add_lora(model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout, top_layers=config.lora_layers)
    if config.dropout == "fast":
        from training.dropout import use_fast_dropout

        use_fast_dropout(model)
    for p in model.heads.parameters():
        p.requires_grad_(True)
    return model


def _optimizer(model: Any, config: FitConfig) -> Any:
    import torch

    lora = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("heads.")]
    heads_w = [model.heads.weight]
    heads_b = [model.heads.bias]
    groups = [
        {"params": lora, "lr": config.lr, "weight_decay": config.weight_decay, "base_lr": config.lr},
        {"params": heads_w, "lr": config.head_lr, "weight_decay": config.weight_decay, "base_lr": config.head_lr},
        {"params": heads_b, "lr": config.head_lr, "weight_decay": 0.0, "base_lr": config.head_lr},
    ]
    return torch.optim.AdamW(groups, betas=(0.9, 0.999), eps=1e-8)


def _step_seed(seed: int, step: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"dropout:{seed}:{step}".encode(), digest_size=7).digest(), "little")


def _encodings(seed: int, step: int, n: int, fraction: float) -> list[str]:
    if not fraction:
        return ["packed"] * n
    draws = np.random.default_rng([seed, step, 7]).random(n)
    return ["npair" if d < fraction else "packed" for d in draws]


def fit(
    model: Any,
    requests: Sequence[LabeledRequest],
    config: FitConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
) -> tuple[Any, FitResult]:
    """Train `model` (a `PackedCrossEncoder`, LoRA added here) on `requests` on `config.device`; returns
    (model on CPU, result)."""
    import torch

    from controller.torch_model import to_tensors
    from training.losses import DecisionLoss

    torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    bert_config = model.config
    inference_attention_dropout = bert_config.attention_probs_dropout_prob
    bert_config.attention_probs_dropout_prob = config.attention_dropout  # read by `encode` only in training mode
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = prepare_model(model, config)
    model.to(device)
    if config.precision == "bf16" and not native_bf16(device):
        log.warning("precision=bf16 on %s without native bfloat16: autocast is emulated and slower than fp32", device)
    loss_fn = DecisionLoss(model, rps_weight=config.rps_weight, listwise_weight=config.listwise_weight)
    optimizer = _optimizer(model, config)
    sampler = BalancedSampler(requests, tokens_per_step=config.tokens_per_step, power=config.family_power, seed=config.seed,
                              boost=boost_factors(config.family_boost), lists=config.listwise_weight > 0)
    log_path = run / "train_log.jsonl"
    start_step, stats = 0, {"tokens": 0, "labels": 0}
    data = data_fingerprint(requests)
    if resume and latest_checkpoint(run) is None:
        raise CheckpointError(f"--resume: no checkpoint under {checkpoint_dir(run)}")
    resumed = resume_checkpoint(run, model, optimizer, config, data) if resume else None
    if resumed is not None:
        ckpt, start_step, stats = resumed
        truncate_log(log_path, start_step)
        log.info("resumed from %s (step %d)", ckpt, start_step)
    else:
        if resume:
            log.warning("--resume: no checkpoint under %s could be read; the fit starts from step 0", checkpoint_dir(run))
        log_path.unlink(missing_ok=True)
        clear_checkpoints(run)
    write_text_atomic(run / "fit_config.json", json.dumps(config.to_json(), indent=2) + "\n")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    params = [p for p in model.parameters() if p.requires_grad]
    began = time.perf_counter()
    step = start_step
    completed = True
    bar = _progress(range(start_step + 1, config.steps + 1), progress, start_step, config.steps)
    model.train()
    try:
        with log_path.open("a", encoding="utf-8", buffering=1) as log_file:  # line-buffered: tail -f works
            for step in bar:
                t0 = time.perf_counter()
                chosen = [requests[i] for i in sampler.indices(step)]
                batch = collate(chosen, encodings=_encodings(config.seed, step, len(chosen), config.npair_fraction), max_batch_tokens=config.max_batch_tokens)
                labels = label_tensors(batch).to(device)
                factor = lr_factor(step, config)
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * factor
                torch.manual_seed(_step_seed(config.seed, step))  # seeds the CUDA generators too
                with _autocast(config, device):
                    outputs = [model(**to_tensors(b.arrays(), device)).reshape(-1) for b in batch.batches]
                value = loss_fn(torch.cat(outputs).float(), labels)  # type: ignore[arg-type]
                optimizer.zero_grad(set_to_none=True)
                value.total.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))
                optimizer.step()
                stats["tokens"] += batch.tokens
                stats["labels"] += batch.labels
                entry = {"step": step, "loss": round(float(value.total.detach()), 6), **{k: round(v, 6) for k, v in value.parts.items()},
                         "lr": config.lr * factor, "grad_norm": round(grad_norm, 4), "tokens": batch.tokens, "labels": batch.labels,
                         "seconds": round(time.perf_counter() - t0, 3)}
                log_file.write(json.dumps(entry) + "\n")
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix(loss=f"{entry['loss']:.3f}", lr=f"{entry['lr']:.1e}")
                if step % config.checkpoint_every == 0 or step == config.steps:
                    log_file.flush()
                    save_checkpoint(run, step, model, optimizer, config, stats, data)
                if config.max_minutes and time.perf_counter() - began > 60 * config.max_minutes and step < config.steps:
                    log_file.flush()
                    save_checkpoint(run, step, model, optimizer, config, stats, data)
                    log.warning("stopped at step %d of %d: max_minutes=%s reached", step, config.steps, config.max_minutes)
                    completed = False
                    break
    except KeyboardInterrupt as interrupt:  # every checkpoint is written whole (`save_checkpoint`): the last one resumes
        raise FitInterrupted(_interrupted(run, step, config)) from interrupt
    model.eval()
    model.to("cpu")  # the artifact is saved and exported from CPU tensors
    bert_config.attention_probs_dropout_prob = inference_attention_dropout
    entries = read_log(log_path)
    losses = [e["loss"] for e in entries]
    plot = plot_log(entries, run / "loss.png")
    result = FitResult(
        steps_done=step, completed=completed, seconds=round(time.perf_counter() - began, 2),
        final_loss=float(np.mean(losses[-50:])) if losses else math.nan, first_loss=float(np.mean(losses[:50])) if losses else math.nan,
        trainable_parameters=int(trainable), total_parameters=int(total), tokens_seen=int(stats["tokens"]), labels_seen=int(stats["labels"]),
        resumed_from=start_step, log_path=str(log_path), plot_path=plot,
    )
    write_text_atomic(run / "fit_result.json", json.dumps(asdict(result), indent=2) + "\n")
    return model, result


def _interrupted(run: Path, step: int, config: FitConfig) -> str:
    """What a Ctrl-C during step `step` leaves: the checkpoint a `--resume` continues from, or none."""
    latest = latest_checkpoint(run)
    if latest is None:
        return (f"the fit was interrupted during step {step} of {config.steps}, before its first checkpoint "
                f"(every {config.checkpoint_every} steps): rerun it without --resume")
    done = int(latest.stem.removeprefix("step-"))
    return (f"the fit was interrupted during step {step} of {config.steps}; its latest checkpoint is step {done} "
            f"({latest}): rerun the same command with --resume to continue from it")


def _progress(steps: range, enabled: bool, done: int, total: int) -> Any:
    if not enabled:
        return steps
    from tqdm.auto import tqdm

    return tqdm(steps, initial=done, total=total, desc="fit", unit="step", dynamic_ncols=True)
