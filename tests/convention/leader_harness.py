"""A leader servo for the convention tests: a real ServoRuntime in its own process, driven by JSON
lines on stdin and answering JSON lines on stdout.

Its own process, because a convention's shared key must be installed before the first actor
system of a process starts (``message_auth.install_key``), and the test process has started
others already; and because the tests kill it. Run as ``python leader_harness.py CONFIG RUN_DIR``.

Commands (one JSON object per line; every answer carries ``"ok"`` and the elapsed seconds):

- ``{"cmd": "start"}``: start the runtime (its connectors, placed ones included).
- ``{"cmd": "run", "op": "measure", "duration": 0}``: run one operation; the result.
- ``{"cmd": "begin", "op": "measure", "duration": 60}``: begin one, answer at once.
- ``{"cmd": "wait", "timeout": 10}``: the begun operation's result (or null).
- ``{"cmd": "cancel"}``: cancel, answer once every connector is fresh again (``elapsed``).
- ``{"cmd": "status"}``: every connector: state, pid, generation, restarts, where it runs.
- ``{"cmd": "stop"}``: stop the runtime and exit 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from servo_actors.actors import ServoRuntime
from servo_actors.config import load_config
from servo_actors.connectors.base import Control


def _result(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "status": result.status,
        "reason": result.reason,
        "message": result.message,
        "data": result.data,
        "parts": {
            name: {"status": p.status, "reason": p.reason, "message": p.message}
            for name, p in result.parts.items()
        },
    }


def main() -> int:
    config = load_config(sys.argv[1])
    runtime = ServoRuntime(config, run_dir=Path(sys.argv[2]))
    current = None
    try:
        for line in sys.stdin:
            command = json.loads(line)
            started = time.monotonic()
            answer: dict[str, Any] = {"ok": True}
            try:
                kind = command["cmd"]
                if kind == "start":
                    runtime.start()
                elif kind == "run":
                    control = Control(duration=command.get("duration", 0))
                    answer["result"] = _result(runtime.run(command["op"], control=control))
                elif kind == "begin":
                    current = runtime.begin(
                        command["op"], control=Control(duration=command.get("duration", 0))
                    )
                elif kind == "wait":
                    answer["result"] = _result(runtime.wait(current, command.get("timeout", 10.0)))
                elif kind == "cancel":
                    runtime.cancel()
                    if current is not None:
                        answer["result"] = _result(runtime.wait(current, 1.0))
                elif kind == "status":
                    status = runtime.status()
                    answer["children"] = [
                        {
                            "name": c.name,
                            "state": c.state,
                            "pid": c.pid,
                            "generation": c.generation,
                            "restarts": c.restarts,
                            "where": getattr(c, "where", None) or "local",
                        }
                        for c in status.children
                    ]
                    answer["not_up"] = runtime.not_up
                elif kind == "stop":
                    runtime.stop()
                    print(json.dumps({"ok": True, "elapsed": time.monotonic() - started}), flush=True)
                    return 0
            except Exception as exc:  # the test reads what went wrong
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            answer["elapsed"] = time.monotonic() - started
            print(json.dumps(answer, default=str), flush=True)
    finally:
        runtime.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
