"""Closed-loop load benchmark of the server on loopback: batching on vs off at 1/4/16/64 clients.

    python -m serving.loadbench                                  # local ONNX when loadable, else heuristic
    python -m serving.loadbench --controller heuristic --duration 5 --concurrency 1,16

Starts its own servers (subprocesses on 127.0.0.1, one per batching mode), waits for /readyz, then for each
concurrency level and each mode in turn runs closed-loop clients (each sends its next request as soon as the previous one is
answered) for `--duration` seconds or `--max-requests` requests, whichever comes first. Requests cycle
through the Jev-Mem mix of EVALUATION.md section 3 (typing, pair, routing, stopping) with varied texts.
Prints throughput, p50 / p99 latency of answered requests, 429 / 503 counts, other errors and the mean
backend batch size (from /metrics). Timings on shared machines are noisy: compare modes within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"

OBSERVATIONS = [
    "Mira: My old bicycle broke on the way to work this morning.",
    "Tom: I have been learning to bake sourdough bread every Sunday.",
    "Ana: We adopted a grey cat named Pixel from the shelter last week.",
    "Jon: To reset the router, hold the button for ten seconds, then wait.",
    "Mira: I bought a new bicycle because the old one could not be fixed.",
    "Ana: I prefer tea over coffee, especially green tea in the afternoon.",
]
QUERIES = ["Why did Mira buy a new bicycle?", "When did Ana adopt her cat?", "What does Tom bake on Sundays?", "How do I reset the router?"]


def request_mix(i: int) -> dict[str, Any]:
    """The i-th request of the fixed mix (typing 4 Nouls; pair 5 Nouls + a 7-option Choice; routing 6
    Nouls; stopping query + 5 evidence items, 4 Nouls); texts vary with i."""
    from controller.families import family_questions

    n = len(OBSERVATIONS)
    obs = f"{OBSERVATIONS[i % n]} (note {i})"
    query = f"{QUERIES[i % len(QUERIES)]} #{i}"
    kind = i % 4
    if kind == 0:
        state: Any = {"observation": obs}
        questions = family_questions("typing")
    elif kind == 1:
        state = {"memory_a": obs, "memory_b": OBSERVATIONS[(i + 1) % n]}
        questions = family_questions("pair")
    elif kind == 2:
        state = {"query": query}
        questions = family_questions("routing")
    else:
        state = {"query": query, "evidence": [OBSERVATIONS[(i + k) % n] for k in range(5)], "depth": 1}
        questions = family_questions("stopping")
    return {"model": "jev-latest", "state": state, "questions": questions}


# ------------------------------------------------------------------------------------------------ server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    settings: dict[str, str]
    start_timeout_s: float
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, **self.settings, "JEVMEM_HOST": HOST, "JEVMEM_PORT": str(self.port)}
        code = "from serving.server import run; run(log_level='warning')"
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env)
        deadline = time.monotonic() + self.start_timeout_s
        import httpx2

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode} during start-up")
            try:
                if httpx2.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.25)
        self.__exit__(None, None, None)
        raise TimeoutError(f"the server was not ready within {self.start_timeout_s:g}s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# ------------------------------------------------------------------------------------------------ clients
@dataclass
class Cell:
    batching: bool
    clients: int
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: int = 0  # no HTTP response (connection error, client timeout)
    batch_calls: float = 0.0
    batched_requests: float = 0.0

    @property
    def ok(self) -> int:
        return self.statuses.get(200, 0)

    @property
    def errors(self) -> int:
        return self.failures + sum(n for s, n in self.statuses.items() if s not in (200, 429, 503))

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def _run_cell(url: str, cell: Cell, duration_s: float, max_requests: int, timeout_s: float) -> None:
    import httpx2

    bodies = [json.dumps(request_mix(i)).encode() for i in range(64)]
    counter = 0
    deadline = time.monotonic() + duration_s
    limits = httpx2.Limits(max_connections=cell.clients, max_keepalive_connections=cell.clients)
    async with httpx2.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:

        async def worker() -> None:
            nonlocal counter
            while time.monotonic() < deadline and counter < max_requests:
                body = bodies[counter % len(bodies)]
                counter += 1
                started = time.perf_counter()
                try:
                    r = await client.post("/v1/systemone", content=body, headers={"content-type": "application/json"})
                    await r.aread()
                except httpx2.HTTPError:
                    cell.failures += 1
                    continue
                cell.statuses[r.status_code] = cell.statuses.get(r.status_code, 0) + 1
                if r.status_code == 200:
                    cell.latencies_ms.append((time.perf_counter() - started) * 1000)
                elif r.status_code in (429, 503):
                    await asyncio.sleep(min(1.0, float(r.headers.get("retry-after-ms", "100")) / 1000))

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(cell.clients)))
        cell.seconds = time.monotonic() - started


def _batch_stats(url: str) -> tuple[float, float]:
    import httpx2

    text = httpx2.get(url + "/metrics", timeout=10).text
    count = re.search(r"^jevmem_batch_size_count (\S+)$", text, re.M)
    total = re.search(r"^jevmem_batch_size_sum (\S+)$", text, re.M)
    return (float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0)


def run_bench(args: argparse.Namespace) -> list[Cell]:
    """One server per batching mode, all up at once; cells interleave the modes at each concurrency level
    so that drift in a shared machine's load hits both modes alike."""
    cells: list[Cell] = []
    with contextlib.ExitStack() as stack:
        servers: dict[bool, ServerProcess] = {}
        for batching in args.modes:
            settings = {
                "JEVMEM_CONTROLLER": args.controller,
                "JEVMEM_CONTROLLER_OPTIONS": json.dumps(args.controller_options),
                "JEVMEM_BATCHING": "on" if batching else "off",
                "JEVMEM_MAX_BATCH_SIZE": str(args.max_batch_size),
                "JEVMEM_MAX_WAIT_MS": str(args.max_wait_ms),
                "JEVMEM_QUEUE_SIZE": str(args.queue_size),
                "JEVMEM_REQUEST_TIMEOUT_S": str(args.request_timeout),
            }
            print(f"# starting server ({args.controller}, batching {'on' if batching else 'off'}) ...", file=sys.stderr, flush=True)
            servers[batching] = stack.enter_context(ServerProcess(settings, args.start_timeout))
            asyncio.run(_run_cell(servers[batching].url, Cell(batching, 1), min(2.0, args.duration), 20, args.client_timeout))  # warm-up
        for clients in args.concurrency:
            for batching, server in servers.items():
                cell = Cell(batching, clients)
                before = _batch_stats(server.url)
                asyncio.run(_run_cell(server.url, cell, args.duration, args.max_requests, args.client_timeout))
                after = _batch_stats(server.url)
                cell.batch_calls, cell.batched_requests = after[0] - before[0], after[1] - before[1]
                cells.append(cell)
                print(_row(cell), file=sys.stderr, flush=True)
    return cells


def _row(c: Cell) -> str:
    mean_batch = c.batched_requests / c.batch_calls if c.batch_calls else 0.0
    rate = c.ok / c.seconds if c.seconds else 0.0
    return (
        f"| {'on' if c.batching else 'off':>8} | {c.clients:>7} | {c.ok + c.errors + c.statuses.get(429, 0) + c.statuses.get(503, 0):>8} "
        f"| {rate:>8.1f} | {c.percentile(0.5):>8.0f} | {c.percentile(0.99):>8.0f} | {c.statuses.get(429, 0):>5} "
        f"| {c.statuses.get(503, 0):>5} | {c.errors:>6} | {mean_batch:>10.1f} |"
    )


def table(cells: Sequence[Cell], controller: str) -> str:
    lines = [
        f"controller: {controller}",
        "| batching | clients | requests |    req/s |  p50 ms |  p99 ms |   429 |   503 | errors | mean batch |",
        "|---------:|--------:|---------:|---------:|--------:|--------:|------:|------:|-------:|-----------:|",
        *(_row(c) for c in cells),
    ]
    by = {(c.batching, c.clients): c for c in cells}
    for clients in sorted({c.clients for c in cells}):
        on, off = by.get((True, clients)), by.get((False, clients))
        if on and off and off.ok and off.seconds and on.seconds:
            ratio = (on.ok / on.seconds) / (off.ok / off.seconds)
            lines.append(f"batching on / off throughput at {clients} clients: {ratio:.2f}x")
    return "\n".join(lines)


def default_controller() -> str:
    """`local` (ONNX) when its runtime and module are importable, else `heuristic`."""
    import importlib.util

    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("controller.local"):
        return "local"
    return "heuristic"


def batch_ceiling(controller: str, options: dict[str, Any], *, n: int = 16, trials: int = 7) -> list[float]:
    """In process, no server: seconds of n single-request backend calls / seconds of one n-request call, per
    trial. Cross-request batching can gain at most this much (it also pays queueing and HTTP)."""
    from controller.backend import BackendRequest, create_backend
    from controller.questions import normalize_questions

    backend = create_backend(controller, **options)
    try:
        requests = [BackendRequest(m["state"], tuple(normalize_questions(m["questions"]).values())) for m in map(request_mix, range(n))]
        backend.answer(requests)  # warm-up
        ratios = []
        for _ in range(trials):
            started = time.perf_counter()
            for request in requests:
                backend.answer([request])
            single = time.perf_counter() - started
            started = time.perf_counter()
            backend.answer(requests)
            ratios.append(single / (time.perf_counter() - started))
        return ratios
    finally:
        backend.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m serving.loadbench", description=__doc__.split("\n\n")[0])
    p.add_argument("--controller", default=None, help="backend name (default: local when loadable, else heuristic)")
    p.add_argument("--controller-options", type=json.loads, default={}, help="JSON object of backend options")
    p.add_argument("--concurrency", default="1,4,16,64", help="comma-separated client counts")
    p.add_argument("--modes", default="on,off", help="batching modes to run: on,off")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per cell (bounded)")
    p.add_argument("--max-requests", type=int, default=5000, help="requests per cell at most")
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument("--queue-size", type=int, default=256)
    p.add_argument("--request-timeout", type=float, default=8.0, help="server-side deadline (then 503)")
    p.add_argument("--client-timeout", type=float, default=30.0)
    p.add_argument("--start-timeout", type=float, default=600.0, help="seconds to wait for /readyz")
    args = p.parse_args(argv)
    args.controller = args.controller or default_controller()
    args.concurrency = [int(x) for x in args.concurrency.split(",") if x.strip()]
    args.modes = [m.strip() == "on" for m in args.modes.split(",") if m.strip()]
    if not 0 < args.duration <= 600 or args.max_requests < 1 or any(c < 1 or c > 1024 for c in args.concurrency):
        p.error("duration must be in (0, 600], max-requests >= 1, concurrency in 1..1024")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cells = run_bench(args)
    print(table(cells, args.controller))
    ratios = batch_ceiling(args.controller, args.controller_options)
    print(f"backend ceiling (in process): one call with 16 requests vs 16 single calls: "
          f"median {statistics.median(ratios):.2f}x over {len(ratios)} trials ({', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
