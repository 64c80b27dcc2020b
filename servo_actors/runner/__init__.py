"""The control loop (moved to ``loop``, split next, issue 24): every name importable as before."""

from __future__ import annotations

from servo_actors.runner.loop import (
    _RESULT_EVENTS,
    REPLY_CHECK_FIRST,
    SLEEP_SLICE,
    TICK_INTERVAL,
    Observer,
    Runner,
    _cancel_reason,
    _control,
    _data_param,
    _dump,
    _ProgressPosts,
    _settings_only,
    result_param,
    telemetry,
)

__all__ = [
    "Observer",
    "REPLY_CHECK_FIRST",
    "Runner",
    "SLEEP_SLICE",
    "TICK_INTERVAL",
    "_ProgressPosts",
    "_RESULT_EVENTS",
    "_cancel_reason",
    "_control",
    "_data_param",
    "_dump",
    "_settings_only",
    "result_param",
    "telemetry",
]
