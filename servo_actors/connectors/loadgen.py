"""``loadgen``: HTTP load during every measurement, with latency, throughput and error metrics.

::

    - name: load
      type: loadgen
      config:
        url: http://127.0.0.1:8080/
        method: GET
        rate: 50              # requests/s over all threads; 0 = as fast as concurrency allows
        concurrency: 4        # threads, each with one connection
        max_concurrency: null # with a rate: threads added up to this many while the rate is not held
        timeout: 5s           # per request (connect, and each read)
        headers: {Accept: application/json}
        body: null
        insecure: false       # true: TLS certificates are not checked (a warning per measurement)
        keepalive: true       # false: a new connection for every request

Instead of ``url`` (with ``method`` and ``body``), ``targets_file: PATH`` names a file of several
requests, sent in turn, in vegeta's ``http`` or ``json`` format (``targets_format``; see
``loadgen_targets``); ``headers`` are then added to every target's own. The path is read when the
configuration is validated, relative to the working directory.

For ``warmup + duration`` it sends requests from ``concurrency`` threads (paced to ``rate``
when it is not 0); requests started during the warmup are discarded, the rest make the metrics,
all single readings ``{"unit": ..., "value": ...}`` over the measured window:

- ``throughput`` (rps): requests started in the window and answered (any status) or failed,
  divided by the window's length;
- ``error_rate`` (ratio, 0-1): the fraction of them that failed (no response, or a status
  outside 200-399; redirects are not followed, so a 3xx counts as success);
- ``latency_p50``, ``latency_p90``, ``latency_p99``, ``latency_max`` (ms): nearest-rank
  percentiles of the time to a complete response, failures included (a request that timed out
  counts with the time it took to fail).

The delay of the control is not waited for: load stops when the window ends. Requests ignore
proxy settings from the environment: the load goes straight to the targets.

servox's vegeta connector had these options; ``concurrency`` is its ``workers`` and
``max_concurrency`` its ``max_workers``: with a rate, a thread is added (up to
``max_concurrency``) each time a request goes out more than one interval late.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from pydantic import Field, PrivateAttr, field_validator, model_validator

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.loadgen_targets import METHODS, Target, TargetsFormat, read_targets
from servo_actors.connectors.wait import DEFAULT_PROGRESS_INTERVAL, wait_with_progress
from servo_actors.durations import format_duration

__all__ = ["JOIN_GRACE", "MAX_CONCURRENCY", "METRIC_UNITS", "LoadgenConfig", "LoadgenConnector"]

METRIC_UNITS = {
    "throughput": "rps",
    "error_rate": "ratio",
    "latency_p50": "ms",
    "latency_p90": "ms",
    "latency_p99": "ms",
    "latency_max": "ms",
}
_PERCENTILES = {"latency_p50": 50.0, "latency_p90": 90.0, "latency_p99": 99.0, "latency_max": 100.0}
JOIN_GRACE = 2.0
"""Seconds, beyond the request timeout, to wait for worker threads once the load stops."""
MAX_CONCURRENCY = 256

log = logging.getLogger(__name__)


class LoadgenConfig(StrictModel):
    """Configuration of ``loadgen``."""

    url: str | None = None
    """The one URL requests go to; or targets_file."""
    targets_file: str | None = None
    """A file of several requests, sent in turn (vegeta's http or json format); or url."""
    targets_format: TargetsFormat = "http"
    insecure: bool = False
    """TLS certificates of the targets are not checked (a warning is logged at each measurement)."""
    keepalive: bool = True
    """false: every request on a new connection (``Connection: close``)."""
    method: str = "GET"
    rate: float = Field(0.0, ge=0.0)
    concurrency: int = Field(4, ge=1, le=MAX_CONCURRENCY)
    max_concurrency: int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    """With a rate: more threads are started, up to this many, while the rate is not held (vegeta's
    max_workers); null: concurrency threads, fixed."""
    timeout: Duration = 5.0
    # Headers may carry credentials: kept out of repr and logs.
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    body: str | None = None
    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL

    # What is sent, in turn: the url's one request, or the targets file's; set by validation.
    _targets: list[Target] = PrivateAttr(default_factory=list)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        method = value.upper()
        if method not in METHODS:
            raise ValueError(f"{value!r} is not one of {', '.join(METHODS)}")
        return method

    @model_validator(mode="after")
    def _growth(self) -> LoadgenConfig:
        if self.max_concurrency is not None and self.max_concurrency < self.concurrency:
            raise ValueError(
                f"max_concurrency ({self.max_concurrency}) is below concurrency ({self.concurrency})"
            )
        return self

    @model_validator(mode="after")
    def _url_or_targets(self) -> LoadgenConfig:
        if (self.url is None) == (self.targets_file is None):
            raise ValueError("give url or targets_file (one of them)")
        if self.targets_file is None:
            body = self.body.encode() if self.body is not None else None
            self._targets = [Target(self.method, str(self.url), {}, body)]
            return self
        if "method" in self.model_fields_set or self.body is not None:
            raise ValueError("with targets_file, each target has its own method and body: leave those out")
        self._targets = read_targets(Path(self.targets_file).expanduser(), self.targets_format)
        return self

    @property
    def targets(self) -> list[Target]:
        return list(self._targets)

    @property
    def what(self) -> str:
        """The requests sent, for messages: ``GET URL`` or ``N targets from FILE``."""
        if self.targets_file is not None:
            return f"{len(self._targets)} target(s) from {self.targets_file}"
        return f"{self.method} {self.url}"

    @field_validator("timeout", "progress_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value


@dataclass
class _Sample:
    started: float  # monotonic
    seconds: float
    ok: bool


class _Pacer:
    """Hands out send times ``1/rate`` apart, shared by every worker; no debt piles up when late."""

    def __init__(self, rate: float) -> None:
        self._gap = 1.0 / rate if rate > 0 else 0.0
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def next_slot(self) -> tuple[float, bool]:
        """The next send time, and whether the schedule is behind (that slot was due more than
        one gap ago: the workers cannot hold the rate)."""
        with self._lock:
            now = time.monotonic()
            behind = self._gap > 0 and now - self._next > self._gap
            slot = max(self._next, now)
            self._next = slot + self._gap
            return slot, behind


class _Crew:
    """The worker threads of one measurement: ``start`` more while there is room, ``join`` them all."""

    def __init__(self, name: str, work: Callable[[list[_Sample]], None], run: _Run, limit: int) -> None:
        self._name = name
        self._work = work
        self._run = run
        self._limit = limit
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._threads)

    def start(self, count: int = 1) -> None:
        with self._lock:
            for _ in range(count):
                if len(self._threads) >= self._limit or self._run.stop.is_set():
                    return
                samples: list[_Sample] = []
                self._run.samples.append(samples)
                # Daemon: a worker stuck past the join bound must not keep the process alive.
                thread = threading.Thread(
                    target=self._work,
                    args=(samples,),
                    name=f"loadgen-{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def join(self, seconds: float) -> None:
        """Wait for every thread, ``seconds`` in all (no thread starts once the run is stopped)."""
        join_by = time.monotonic() + seconds
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, join_by - time.monotonic()))


class _Rotation:
    """Hands out the targets in turn to every worker."""

    def __init__(self, targets: list[Target]) -> None:
        self._cycle = itertools.cycle(targets)
        self._lock = threading.Lock()

    def next(self) -> Target:
        with self._lock:
            return next(self._cycle)


@dataclass
class _Run:
    """One measurement's shared state: when to stop, and each worker's samples."""

    ends: float
    stop: threading.Event = field(default_factory=threading.Event)
    samples: list[list[_Sample]] = field(default_factory=list)


class LoadgenConnector(Connector):
    """Generates HTTP load on every MEASURE and reports what it saw. See the module docstring."""

    config_model = LoadgenConfig
    config: LoadgenConfig

    def describe(self) -> dict[str, Any]:
        return {"components": {}, "metrics": {name: {"unit": unit} for name, unit in METRIC_UNITS.items()}}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        began = time.monotonic()
        window_start = began + control.warmup
        total = control.warmup + control.duration
        run = _Run(ends=began + total)
        pacer = _Pacer(self.config.rate)
        rotation = _Rotation(self.config.targets)
        if self.config.insecure:
            log.warning(
                "loadgen %s: insecure: the TLS certificates of %s are not checked",
                self.name,
                self.config.what,
            )
        crew = _Crew(
            self.name,
            lambda samples: self._work(run, pacer, rotation, crew, samples),
            run,
            self.config.max_concurrency or self.config.concurrency,
        )
        crew.start(self.config.concurrency)
        try:
            wait_with_progress(
                total,
                progress,
                interval=self.config.progress_interval,
                message=lambda elapsed: self._status(run, began + elapsed, window_start),
            )
        finally:
            run.stop.set()
            crew.join(self.config.timeout + JOIN_GRACE)
        window = [s for samples in run.samples for s in list(samples) if window_start <= s.started < run.ends]
        if not window:
            raise ConnectorFailure(
                f"{self.name}: no request to {self.config.what} finished in the "
                f"{format_duration(control.duration)} measurement window",
                reason="no-data",
            )
        values = _metrics(window, control.duration)
        grew = (
            f"; threads grew to {crew.size} to hold the rate" if crew.size > self.config.concurrency else ""
        )
        return {
            "metrics": {
                name: {"unit": METRIC_UNITS[name], "value": values[name]}
                for name in metrics
                if name in values
            },
            "annotations": {"loadgen": f"{len(window)} requests to {self.config.what}{grew}"},
        }

    def _work(
        self, run: _Run, pacer: _Pacer, rotation: _Rotation, crew: _Crew, samples: list[_Sample]
    ) -> None:
        config = self.config
        extra = {} if config.keepalive else {"Connection": "close"}
        with requests.Session() as session:
            session.trust_env = False  # no proxies or .netrc: the load goes straight to the target
            while not run.stop.is_set():
                slot, behind = pacer.next_slot()
                if behind:
                    crew.start()  # a no-op at the limit (max_concurrency, else concurrency)
                if slot >= run.ends or run.stop.wait(max(0.0, slot - time.monotonic())):
                    return
                target = rotation.next()
                started = time.monotonic()
                try:
                    response = session.request(
                        target.method,
                        target.url,
                        headers={**config.headers, **target.headers, **extra},
                        data=target.body,
                        timeout=config.timeout,
                        allow_redirects=False,
                        verify=not config.insecure,
                    )
                    ok = 200 <= response.status_code < 400
                except requests.RequestException:
                    ok = False
                samples.append(_Sample(started, time.monotonic() - started, ok))

    def _status(self, run: _Run, now: float, window_start: float) -> str:
        if now < window_start:
            return f"warming up, {format_duration(window_start - now)} to go"
        counted = [s for samples in run.samples for s in list(samples) if s.started >= window_start]
        errors = sum(not s.ok for s in counted)
        return f"{len(counted)} requests measured, {errors} failed"


def _metrics(samples: list[_Sample], duration: float) -> dict[str, float]:
    latencies = sorted(s.seconds * 1000.0 for s in samples)
    values = {
        "error_rate": sum(not s.ok for s in samples) / len(samples),
        **{name: _nearest_rank(latencies, p) for name, p in _PERCENTILES.items()},
    }
    if duration > 0:
        values["throughput"] = len(samples) / duration
    return values


def _nearest_rank(ordered: list[float], percentile: float) -> float:
    """The smallest value with at least ``percentile`` % of ``ordered`` at or below it."""
    rank = max(1, math.ceil(percentile / 100.0 * len(ordered)))
    return ordered[rank - 1]
