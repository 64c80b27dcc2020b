"""Helpers of ``scripts/bench_loop.py``: the control loops of servo-actors and servox, measured side by side.

- ``processes``: starting agents as real subprocesses, finding every process of one by a marker in
  its environment, their CPU time from /proc, and stopping them by PID;
- ``optimizer``: the one embedded optimizer both agents talk to, with a driver the benchmark
  feeds, and waits on its request log;
- ``agents``: how to start servo-actors and servox with the same connectors (4 no-op; 3 no-op
  and one that never finishes its measurement);
- ``phases``: the measurements (cold start, per-command overhead, cancel, idle CPU), all read
  from the optimizer's request log (``at``: a request arrived; ``replied_at``: its answer left);
- ``servox_venv``: a throwaway virtualenv with servox 25.3.0;
- ``report``: the machine, the statistics, the table and the BENCHMARKS.md section.
"""
