"""A servox (25.3.0) connector for benchmarking servox's control loop against the embedded optimizer.

servox's built-in ``wait`` connector posts MEASURE progress only every min(60 s, measurement
length), so a cancel (answered to a progress post) takes a minute to reach it; it also describes
nothing and ignores ADJUST. This connector answers all three at once, offline:

- DESCRIBE: one component ``web`` with ``cpu`` (range) and ``replicas`` (range) settings, and
  the ``throughput`` metric;
- MEASURE: runs warmup+duration+delay, posting progress every ``progress_every`` seconds, and
  returns one ``throughput`` reading;
- ADJUST: takes the values given and returns the component as it now is.

It runs inside servox's process (servox imports it), never inside servo-actors. servox finds it by
its dotted path, with this directory on PYTHONPATH::

    connectors:
      bench: servox_bench_connector.BenchConnector
    bench:
      progress_every: 0.1

See docs/interop.md, "Benchmarking servox".
"""

from __future__ import annotations

import datetime

import servo

DEFAULT_PROGRESS_EVERY = 0.1
"""Seconds between MEASURE progress posts (servox's wait connector: 60)."""


class BenchConfiguration(servo.BaseConfiguration):
    progress_every: float = DEFAULT_PROGRESS_EVERY

    @classmethod
    def generate(cls, **kwargs) -> BenchConfiguration:
        return cls()


_DEFAULT_CONTROL = servo.Control()
_THROUGHPUT = servo.Metric("throughput", servo.Unit.requests_per_second)


@servo.metadata(
    description="Offline describe/measure/adjust with fast progress, for benchmarks",
    version="0.1.0",
    homepage="https://example.invalid/servo-actors",
    license=servo.License.apache2,
    maturity=servo.Maturity.experimental,
)
class BenchConnector(servo.BaseConnector):
    """Answers DESCRIBE, MEASURE (with progress every ``progress_every`` s) and ADJUST offline."""

    config: BenchConfiguration

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Fresh values each time servox (re)builds its connectors: as a real application would.
        self.__dict__["_values"] = {"cpu": 1.0, "replicas": 2}

    def _component(self) -> servo.Component:
        values = self.__dict__["_values"]
        return servo.Component(
            name="web",
            settings=[
                servo.RangeSetting(name="cpu", min=0.25, max=4.0, step=0.125, value=values["cpu"]),
                servo.RangeSetting(name="replicas", min=1, max=10, step=1, value=values["replicas"]),
            ],
        )

    @servo.on_event()
    def describe(self, control: servo.Control = _DEFAULT_CONTROL) -> servo.Description:
        return servo.Description(components=[self._component()], metrics=[_THROUGHPUT])

    @servo.on_event()
    async def measure(
        self, *, metrics: list[str] = None, control: servo.Control = _DEFAULT_CONTROL
    ) -> servo.Measurement:
        # servox compares handler signatures with its event's: `list[str] = None` is what it wants.
        length = servo.Duration(control.warmup + control.duration + control.delay)
        if length.total_seconds() > 0:
            progress = servo.EventProgress(timeout=length, settlement=None)
            await progress.watch(self._report, every=servo.Duration(self.config.progress_every))
        reading = servo.DataPoint(_THROUGHPUT, datetime.datetime.now(), 100.0)
        return servo.Measurement(readings=[reading])

    @servo.on_event()
    async def adjust(
        self, adjustments: list[servo.Adjustment], control: servo.Control = _DEFAULT_CONTROL
    ) -> servo.Description:
        values = self.__dict__["_values"]
        for adjustment in adjustments:
            if adjustment.component_name == "web" and adjustment.setting_name in values:
                values[adjustment.setting_name] = float(adjustment.value)
        return servo.Description(components=[self._component()])

    async def _report(self, progress: servo.EventProgress) -> None:
        # servox turns a log record carrying `progress` into a progress post (servo.logging).
        self.logger.info(progress.annotate("benchmark measurement", False), progress=progress.progress)
