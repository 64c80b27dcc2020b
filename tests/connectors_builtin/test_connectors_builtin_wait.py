"""``wait``: holds a measurement open for warmup + duration + delay, reporting progress."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from servo_actors.connectors.base import Control
from servo_actors.connectors.wait import WaitConfig, WaitConnector, wait_with_progress


@pytest.mark.timeout(30)
def test_measure_waits_the_whole_control_and_reports_progress(progress):
    connector = WaitConnector("hold", {"progress_interval": "250ms"})
    began = time.monotonic()
    result = connector.measure([], Control(warmup=0.2, duration=0.5, delay=0.3), progress)
    elapsed = time.monotonic() - began

    assert result == {"metrics": {}, "annotations": {}}
    assert elapsed >= 1.0  # sleeping can run late, never early
    assert elapsed < 15  # only a hang breaks this
    assert len(progress.calls) >= 4  # 1 s at one report per 250 ms
    assert progress.percents == sorted(progress.percents)
    assert progress.percents[-1] == 100
    assert all(0 <= p <= 100 for p in progress.percents)
    assert "of 1s" in progress.calls[-1][2]
    gaps = [later[0] - earlier[0] for earlier, later in zip(progress.calls, progress.calls[1:], strict=False)]
    assert max(gaps) < 5  # reports keep coming while it waits


@pytest.mark.timeout(10)
def test_zero_wait_reports_done_once_at_once(progress):
    began = time.monotonic()
    WaitConnector("hold").measure([], Control(), progress)
    assert time.monotonic() - began < 5
    assert progress.percents == [100]


def test_describes_nothing():
    assert WaitConnector("hold").describe() == {"components": {}, "metrics": {}}


def test_config_validates():
    assert WaitConfig.model_validate({"progress_interval": "2s"}).progress_interval == 2.0
    for bad in ({"progress_interval": 0}, {"progress_interval": "soon"}, {"unknown": 1}):
        with pytest.raises(ValidationError):
            WaitConfig.model_validate(bad)


@pytest.mark.timeout(10)
def test_wait_with_progress_spans_the_given_percent_range(progress):
    wait_with_progress(
        0.3, progress, interval=0.1, message=lambda s: f"{s:.1f}", start_percent=50, end_percent=80
    )
    assert progress.percents[-1] == 80
    assert all(50 <= p <= 80 for p in progress.percents)
    with pytest.raises(ValueError, match="interval"):
        wait_with_progress(1, progress, interval=0, message=str)
