"""Out-of-domain figures for a controller: sys1bench RAG relevance (accuracy, calibration) and jevbench coherence.

    python -m training ood --controller heuristic|local [--model-dir DIR] [--items 150] [--out runs/ood-heuristic]
    python -m training ood --controller local --record-run runs/jevmem-minilm   # also into metrics.json + model card
    python -m training ood --controller heuristic --no-jevbench --without-focus   # best_passage without the focus leak

Serves the controller on loopback with `python -m serving serve` (a subprocess: training must not import serving),
then runs sys1bench `rag_relevance` (fixed seed; best_passage Choice over K passage ids, is_relevant Noul, relevance
Score 0..3) through its `jev_typesafe` adapter and jevbench coherence on `jevbench-mini` (~1,250 requests; smaller
selections score nothing). References in the same run: `uniform` (sys1bench's `majority_prior` adapter unfitted, 1/K,
ties to the first option; for jevbench a uniform function) and `base_rate` (that adapter fitted on the manifest's labels).
Each rag_relevance state also names a `focus` passage (for its two other questions) that is the gold passage in
about 60% of items, so a best_passage score near that share may come from the focus id; `--without-focus` drops the
field and asks best_passage alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from data.paths import replacing, write_text_atomic
from training.errors import PipelineError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
UNIFORM, BASE_RATE = "uniform", "base_rate"


@dataclass(frozen=True)
class OodConfig:
    controller: str = "heuristic"  # server backend name: heuristic | local
    model_dir: str | None = None  # local controller's model directory (default: the committed model)
    items: int = 150  # sys1bench rag_relevance items (3 questions each)
    seed: int = 42  # generator seed (sys1bench's default)
    cardinality: int = 5  # passages per item (the generator's default)
    out_dir: str = ""  # default runs/ood-<controller>
    jevbench_suite: str | None = "jevbench-mini"  # None: skip jevbench
    overflow: str = "refuse"  # local controller: "truncate_state" cuts over-long states (reported) instead of a 413
    # sys1bench: drop the state's `focus` field and ask best_passage alone (the other two questions read `focus`);
    # the leak check: `focus` names the gold passage in about 60% of items, so picking it scores that accuracy
    without_focus: bool = False
    start_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        from controller.template import OVERFLOW_POLICIES

        if self.overflow not in OVERFLOW_POLICIES or (self.overflow != "refuse" and self.controller != "local"):
            raise ValueError(f"overflow must be 'refuse', or 'truncate_state' with the local controller, got {self.overflow!r}")
        if self.items < 1 or not 2 <= self.cardinality <= 255:
            raise ValueError(f"need items >= 1 and 2 <= cardinality <= 255, got {self.items}, {self.cardinality}")

    @property
    def out(self) -> Path:
        return Path(self.out_dir or f"runs/ood-{self.controller}")


SYS1_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accuracy", ("accuracy",)), ("ece15", ("calibration", "ece_width_15")), ("brier", ("calibration", "brier")),
    ("nll", ("calibration", "nll_clipped")), ("mean_conf", ("calibration", "mean_confidence")), ("aurc", ("selective", "aurc")),
    ("transport_fail", ("transport_failure_rate",)), ("schema_fail", ("schema_failure_rate",)), ("p50_ms", ("latency", "p50")),
)


@dataclass(frozen=True)
class QuestionScore:
    """One sys1bench scorecard (one model x one question): `metrics` keyed as SYS1_METRICS, None where NaN."""

    model: str
    question: str
    n: int
    metrics: dict[str, float | None]


@dataclass(frozen=True)
class CoherenceScore:
    """One jevbench report on the tool's 0..100 scale; overall is None unless every dimension was tested."""

    model: str
    overall: float | None
    interval: tuple[float | None, float | None] | None
    dimensions: dict[str, float | None]
    requests: int
    errors: int
    seconds: float


@dataclass(frozen=True)
class OodSummary:
    controller: str
    model: str
    config: dict[str, Any]
    sys1bench: list[QuestionScore] = field(default_factory=list)
    jevbench: list[CoherenceScore] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    artifact_hash: str | None = None  # the local controller's model directory hash, specialists included (None for the heuristic)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def question_scores(cards: Mapping[str, Mapping[str, Any]]) -> list[QuestionScore]:
    """sys1bench scorecards keyed "model / question" (as `sys1bench score` writes them) -> QuestionScore rows."""
    def pick(card: Any, path: tuple[str, ...]) -> float | None:
        for part in path:
            card = card.get(part) if isinstance(card, Mapping) else None
        return _finite(card)

    return [QuestionScore(key.rpartition(" / ")[0], key.rpartition(" / ")[2], int(card.get("n_rows", 0)),
                          {name: pick(card, path) for name, path in SYS1_METRICS}) for key, card in cards.items()]


def coherence_score(model: str, scores: Mapping[str, Any], result: Mapping[str, Any]) -> CoherenceScore:
    """A jevbench `Report.scores` / `Report.result` pair (fractions in 0..1) -> CoherenceScore (0..100)."""
    def _pct(value: Any) -> float | None:
        return None if (v := _finite(value)) is None else round(100.0 * v, 2)

    ci = (scores.get("ci") or {}).get("overall")
    return CoherenceScore(
        model=model, overall=_pct(scores.get("overall")), interval=(_pct(ci[0]), _pct(ci[1])) if ci else None,
        dimensions={k: _pct(v) for k, v in (scores.get("pillars") or {}).items()},
        requests=int(result.get("requests", 0)), errors=len(result.get("errors") or ()),
        seconds=round(float(result.get("wall_seconds") or 0.0), 2),
    )


def run_sys1bench(adapters: Mapping[str, Any], cfg: OodConfig, out: Path) -> list[QuestionScore]:
    """Generate the manifest once, run it through every adapter (label -> sys1bench adapter), score with sys1bench.
    Adapters with a `fit` method are fitted on the manifest (as `sys1bench run` does), except the `uniform` one."""
    from sys1bench.generators import get_generator
    from sys1bench.report import group_rows, markdown_table, scorecard
    from sys1bench.runners import run_items, write_manifest, write_predictions

    out.mkdir(parents=True, exist_ok=True)
    items = get_generator("rag_relevance", n=cfg.items, seed=cfg.seed, cardinality=cfg.cardinality).generate()
    if cfg.without_focus:
        items = [without_focus(item) for item in items]
    with replacing(out / "manifest.jsonl") as tmp:  # sys1bench writes in place: whole files or the old ones
        write_manifest(items, tmp)
    rows = []
    for label, adapter in adapters.items():
        if hasattr(adapter, "fit") and label != UNIFORM:
            adapter.fit(items)
        got = run_items(items, adapter, cache=None, concurrency=1)  # transport failures become failed rows
        getattr(getattr(adapter, "_client", None), "close", lambda: None)()  # jev_typesafe's httpx client
        with replacing(out / f"preds-{label}.jsonl") as tmp:
            write_predictions(got, tmp)
        rows += got
    cards = {f"{m} / {q}": scorecard(rs) for (m, q), rs in group_rows(rows, "model_id", "question_key").items()}
    no_nan = json.loads(json.dumps(cards, default=str), parse_constant=lambda _: None)  # NaN / Infinity -> null
    write_text_atomic(out / "scorecards.json", json.dumps(no_nan, indent=1))
    write_text_atomic(out / "table.md", markdown_table(cards))
    return question_scores(cards)


def without_focus(item: Any) -> Any:
    """A sys1bench rag_relevance item without its `focus` field and with only its best_passage question."""
    from sys1bench.generators.base import estimate_tokens

    if not isinstance(item.state, Mapping) or "best_passage" not in item.questions:
        raise PipelineError(f"sys1bench item {item.task_id} is not a rag_relevance item (no mapping state or no best_passage)")
    state = {k: v for k, v in item.state.items() if k != "focus"}
    return item.model_copy(update={"state": state, "state_tokens": estimate_tokens(json.dumps(state)),
                                   "questions": {"best_passage": item.questions["best_passage"]}})


def uniform_answers(state: Any, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A System One `answers` object with uniform probabilities (the jevbench reference; `state` is ignored)."""
    def one(q: Mapping[str, Any]) -> dict[str, Any]:
        if q["type"] == "noul":
            return {"type": "noul", "noul": 0.5}
        names = list(q["criteria"]) if q["type"] == "choice" else [str(i) for i in range(len(q["criteria"]))]
        return {"type": q["type"], "probabilities": {n: 1 / len(names) for n in names}}

    return {key: one(q) for key, q in questions.items()}


def run_jevbench(models: Mapping[str, Any], suite: str, out: Path) -> list[CoherenceScore]:
    """Evaluate every jevbench backend (label -> backend) on `suite`; no request cache (ports change per run)."""
    import jevbench as jb

    scores = []
    for label, backend in models.items():
        report = jb.evaluate(backend, suite=suite, cache=None, name=label)
        getattr(getattr(backend, "client", None), "close", lambda: None)()  # SystemOneHTTP's httpx client
        report.save(out / f"report-{label}.json.gz")
        scores.append(score := coherence_score(label, report.scores, report.result))
        log.info("jevbench %s: overall %s (%d requests, %d errors)", label, score.overall, score.requests, score.errors)
    return scores


def _get(url: str, timeout: float = 10.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
            return bytes(r.read()) if r.status == 200 else b""
    except OSError:
        return b""


@contextmanager
def serve(cfg: OodConfig, log_path: Path) -> Iterator[str]:
    """`python -m serving serve` on a free loopback port with auth off; yields the base URL once /readyz is 200."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = int(s.getsockname()[1])
    options = json.loads(os.environ.get("JEVMEM_CONTROLLER_OPTIONS") or "{}")  # e.g. {"threads": 1}
    options |= {"model_dir": cfg.model_dir} if cfg.model_dir else {}
    options |= {"overflow": cfg.overflow} if cfg.overflow != "refuse" else {}
    env = {k: v for k, v in os.environ.items() if k != "JEVMEM_API_KEY"}
    env.update(HF_HUB_OFFLINE="1", JEVMEM_CONTROLLER_OPTIONS=json.dumps(options))
    cmd = [sys.executable, "-m", "serving", "serve", "--host", HOST, "--port", str(port), "--controller", cfg.controller]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url, deadline = f"http://{HOST}:{port}", time.monotonic() + cfg.start_timeout_s
    with open(log_path, "wb") as server_log:
        proc = subprocess.Popen(cmd, env=env, stdout=server_log, stderr=subprocess.STDOUT)
        try:
            while not _get(url + "/readyz", timeout=2):
                if proc.poll() is not None or time.monotonic() > deadline:
                    why = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready in {cfg.start_timeout_s:g}s"
                    raise PipelineError(f"the {cfg.controller} server {why} (see {log_path})")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def run_ood(cfg: OodConfig) -> OodSummary:
    """Serve the controller, run both tools against it and the references, write summary.json + summary.md."""
    import jevbench as jb
    from sys1bench.adapters import get_adapter

    digest = None
    if cfg.controller == "local":
        from controller.artifacts import DEFAULT_MODEL_DIR
        from controller.specialists import directory_hash

        digest = directory_hash(cfg.model_dir or DEFAULT_MODEL_DIR)
    t0 = t = time.perf_counter()
    with serve(cfg, cfg.out / "server.log") as url:
        seconds = {"server_start": round(time.perf_counter() - t, 2)}
        model = str(json.loads(_get(url + "/v1/models"))["models"][0]["name"])  # the concrete name, not an alias
        adapters = {model: get_adapter("jev_typesafe", model_id=model, url=url + "/v1/systemone", api_key="local",
                                       deployment="local", probe_models=True, timeout_s=30.0, max_retries=3),
                    # the same adapter class twice: left unfitted = uniform, fitted on the labels = base rate
                    UNIFORM: get_adapter("majority_prior", model_id=UNIFORM), BASE_RATE: get_adapter("majority_prior", model_id=BASE_RATE)}
        t = time.perf_counter()
        rag = run_sys1bench(adapters, cfg, cfg.out / "sys1bench")
        seconds["sys1bench"], t = round(time.perf_counter() - t, 2), time.perf_counter()
        coherence: list[CoherenceScore] = []
        if cfg.jevbench_suite:
            models = {model: jb.systemone(url + "/v1/systemone", model=model, api_key="local"),
                      UNIFORM: jb.from_callable(uniform_answers, name=UNIFORM, concurrent=True)}
            coherence = run_jevbench(models, cfg.jevbench_suite, cfg.out / "jevbench")
            seconds["jevbench"] = round(time.perf_counter() - t, 2)
    seconds["total"] = round(time.perf_counter() - t0, 2)
    summary = OodSummary(cfg.controller, model, {**asdict(cfg), "out_dir": str(cfg.out)}, rag, coherence, seconds, digest)
    write_summary(summary, cfg.out)
    return summary


def to_markdown(summary: OodSummary) -> str:
    def _fmt(value: float | None, digits: int = 3) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    c = summary.config
    lines = [f"## Out of domain: {summary.model} (controller {summary.controller})", "",
             (f"sys1bench rag_relevance, {c.get('items')} items, K={c.get('cardinality')}, seed {c.get('seed')}. References: "
              f"`{UNIFORM}` (1/K, ties to the first option), `{BASE_RATE}` (class prior fitted on these labels)."), "",
             "| model | question | n | " + " | ".join(name for name, _ in SYS1_METRICS) + " |", "|---" * (3 + len(SYS1_METRICS)) + "|"]
    for s in summary.sys1bench:
        cells = [_fmt(v, 1 if k == "p50_ms" else 3) for k, v in s.metrics.items()]
        lines.append(f"| {s.model} | {s.question} | {s.n} | " + " | ".join(cells) + " |")
    if summary.jevbench:
        dims = list(summary.jevbench[0].dimensions)
        lines += ["", (f"jevbench coherence ({c.get('jevbench_suite')}), 0..100. Coherence is not accuracy: `{UNIFORM}` "
                       f"answers uniform distributions. Over-long states: {c.get('overflow', 'refuse')}."), "",
                  "| model | overall | 95% CI | " + " | ".join(dims) + " | requests | errors | seconds |", "|---" * (len(dims) + 6) + "|"]
        for j in summary.jevbench:
            ci = f"{_fmt(j.interval[0], 1)}–{_fmt(j.interval[1], 1)}" if j.interval else "–"
            cells = [_fmt(j.dimensions.get(d), 1) for d in dims]
            tail = f" | {j.requests} | {j.errors} | {j.seconds:.1f} |"
            lines.append(f"| {j.model} | {_fmt(j.overall, 1)} | {ci} | " + " | ".join(cells) + tail)
    lines += ["", "wall seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.seconds.items())]
    return "\n".join(lines) + "\n"


def write_summary(summary: OodSummary, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.json", json.dumps(asdict(summary), indent=1, allow_nan=False))
    write_text_atomic(out / "summary.md", to_markdown(summary))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ood", help="out-of-domain figures: sys1bench RAG relevance + jevbench coherence via the server")
    p.add_argument("--controller", choices=("heuristic", "local"), default="heuristic")
    p.add_argument("--model-dir", default=None, help="local controller model directory (default: the committed model)")
    p.add_argument("--items", type=int, default=OodConfig.items, help=f"sys1bench items (default {OodConfig.items})")
    p.add_argument("--seed", type=int, default=OodConfig.seed)
    p.add_argument("--cardinality", type=int, default=OodConfig.cardinality, help="passages per item")
    p.add_argument("--out", dest="out_dir", default="", help="output directory (default runs/ood-<controller>)")
    p.add_argument("--jevbench-suite", default=OodConfig.jevbench_suite, help="default jevbench-mini (~1,250 requests)")
    p.add_argument("--no-jevbench", dest="jevbench_suite", action="store_const", const=None, help="sys1bench only")
    p.add_argument("--without-focus", action="store_true",
                   help="sys1bench: remove the state's focus field and ask best_passage alone (checks that a score does not come from the focus id)")
    p.add_argument("--truncate-state", dest="overflow", action="store_const", const="truncate_state", default="refuse",
                   help="local controller: cut over-long states to fit (reported) instead of refusing them with 413")
    p.add_argument("--record-run", default="", help="training run directory: keep the summary there as ood.json and refresh the "
                   "model directory's metrics.json and model card (local controller only)")
    p.set_defaults(handler=run)


def record_summary(summary: OodSummary, run_dir: str | Path, model_dir: str | Path | None = None) -> Path:
    """Keep `summary` as `<run_dir>/ood.json`; when the run has stage records and the model directory exists,
    rewrite its metrics.json and model card, which show the figures for the artifact they were measured on."""
    from training.report import read_json, write_report

    if summary.controller != "local" or summary.artifact_hash is None:
        raise PipelineError("only a local controller's figures belong to a model directory; run with --controller local")
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    path = run / "ood.json"
    write_text_atomic(path, json.dumps(asdict(summary), indent=1, allow_nan=False) + "\n")
    if model_dir is None:
        from controller.artifacts import DEFAULT_MODEL_DIR

        model_dir = DEFAULT_MODEL_DIR
    if (run / "stages.json").exists() and (Path(model_dir) / "config.json").exists():
        command = read_json(run / "pipeline_config.json", {}).get("command", "make train")
        write_report(run, model_dir, command)
    return path


def run(args: argparse.Namespace) -> int:
    try:
        cfg = OodConfig(**{f.name: getattr(args, f.name) for f in fields(OodConfig) if hasattr(args, f.name)})
    except ValueError as error:
        raise PipelineError(str(error)) from error
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # one line per request
    if args.record_run and cfg.controller != "local":
        raise PipelineError("--record-run keeps a local model's figures; it needs --controller local")
    if args.record_run and cfg.without_focus:
        raise PipelineError("--record-run keeps the standard figures; --without-focus is a check beside them")
    from data.paths import unwritable

    for flag, folder in (("--out", cfg.out), ("--record-run", Path(args.record_run) if args.record_run else None)):
        problem = folder is not None and unwritable(folder, directory=True)
        if problem:  # found at the first write, it would cost the benchmark runs
            raise PipelineError(f"cannot write {flag} {folder}: {problem}")
    summary = run_ood(cfg)
    print(to_markdown(summary))
    print(f"wrote {cfg.out / 'summary.json'} and {cfg.out / 'summary.md'}", file=sys.stderr)
    if args.record_run:
        print(f"recorded {record_summary(summary, args.record_run, cfg.model_dir)}", file=sys.stderr)
    return 0


__all__ = ["CoherenceScore", "OodConfig", "OodSummary", "QuestionScore", "add_parser", "coherence_score", "question_scores",
           "record_summary", "run_jevbench", "run_ood", "run_sys1bench", "serve", "to_markdown", "uniform_answers", "without_focus",
           "write_summary"]
