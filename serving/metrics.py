"""Prometheus metrics, hand-written (text exposition format 0.0.4, no client library).

Counters, gauges and histograms with fixed label names; every update takes the metric's lock, because the
event loop and the forward thread both record. `ServerMetrics` holds the server's metrics.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return self.header() + [f"{self.name}{_labels(self.label_names, k)} {_fmt(v)}" for k, v in items]


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text)
        self._value = 0.0

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)

    def value(self) -> float:
        with self._lock:
            return self._value

    def render(self) -> list[str]:
        return self.header() + [f"{self.name} {_fmt(self.value())}"]


@dataclass
class _Series:
    counts: list[int]
    total: float = 0.0
    n: int = 0


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        if list(buckets) != sorted(buckets) or not buckets:
            raise ValueError("histogram buckets must be sorted and non-empty")
        self.buckets = tuple(float(b) for b in buckets)
        self._series: dict[tuple[str, ...], _Series] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series([0] * len(self.buckets))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series.counts[i] += 1
            series.total += value
            series.n += 1

    def count(self, **labels: str) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return series.n if series else 0

    def render(self) -> list[str]:
        out = self.header()
        with self._lock:
            items = sorted((k, _Series(list(s.counts), s.total, s.n)) for k, s in self._series.items())
        for key, s in items:
            for bound, c in zip(self.buckets, s.counts):
                le = 'le="' + _fmt(bound) + '"'
                out.append(f"{self.name}_bucket{_labels(self.label_names, key, le)} {c}")
            inf = 'le="+Inf"'
            plain = _labels(self.label_names, key)
            out.append(f"{self.name}_bucket{_labels(self.label_names, key, inf)} {s.n}")
            out.append(f"{self.name}_sum{plain} {_fmt(s.total)}")
            out.append(f"{self.name}_count{plain} {s.n}")
        return out


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class ServerMetrics:
    requests: Counter = field(
        default_factory=lambda: Counter("jevmem_http_requests_total", "HTTP requests by route template, method and status.", ("route", "method", "status"))
    )
    latency: Histogram = field(
        default_factory=lambda: Histogram("jevmem_http_request_duration_seconds", "Time from request start to response end.", LATENCY_BUCKETS, ("route",))
    )
    errors: Counter = field(default_factory=lambda: Counter("jevmem_errors_total", "Error responses by wire error_type.", ("error_type",)))
    batch_size: Histogram = field(default_factory=lambda: Histogram("jevmem_batch_size", "Requests per backend call.", BATCH_BUCKETS))
    forward: Histogram = field(default_factory=lambda: Histogram("jevmem_backend_forward_seconds", "Duration of one backend call.", LATENCY_BUCKETS))
    queue_depth: Gauge = field(default_factory=lambda: Gauge("jevmem_queue_depth", "Requests waiting for the backend."))
    batch_cap: Gauge = field(default_factory=lambda: Gauge("jevmem_batch_cap", "Current batch size cap chosen by the batch tuner."))
    in_flight: Gauge = field(default_factory=lambda: Gauge("jevmem_http_requests_in_flight", "HTTP requests being handled."))

    def render(self) -> str:
        metrics: list[_Metric] = [
            self.requests, self.latency, self.errors, self.batch_size, self.forward, self.queue_depth, self.batch_cap, self.in_flight,
        ]  # fmt: skip
        return "\n".join(line for m in metrics for line in m.render()) + "\n"
