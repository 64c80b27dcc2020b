"""What bounds each figure: the investigation behind the numbers, written under the table.

These were measured by hand on 2026-12-02 (load averages 1-6 on the shared 2-core machine), with
timestamps (``time.time()``) taken at the control loop's seams in a servo process whose runner,
client and runtime methods were wrapped from outside, against the same optimizer and connectors as
bench_loop.py, and compared with the optimizer's request log. Re-check them when the runner, the
client or the actor runtime changes.
"""

from __future__ import annotations

FINDINGS: dict[str, str] = {
    "per_command_p50_ms": (
        "**What bounds the per-command overhead.** At quiet moments the p50 is about 4.9 ms. About "
        "3.4 ms of that is the supervisor round trip. `runtime.begin`'s Thespian `tell` takes about "
        "0.6 ms, because an external tell returns only once the supervisor process has acknowledged "
        "it. Then supervisor -> 4 hosts -> supervisor -> servo takes about 2.8 ms, and every hop there "
        "is a TCP message that the receiving process must acknowledge. The other 1.4 ms is the HTTP "
        "exchange and the loop: reading the reply 0.3, parsing the command 0.1, building the result "
        "and starting its request thread 0.25, and the POST until the optimizer reads it 0.65. servox "
        "runs its connectors as coroutines in one process, so it pays only the second part. The first "
        "part is the price of a process per connector, and it is the part that grows under load: the "
        "six processes take turns on two cores. In a full run at load average 7-9, stretches of about 4.8 ms "
        "and about 9.5 ms per DESCRIBE alternated as other jobs came and went. Nothing in runner.py or the "
        "client would bring this under 5 ms. The round trip belongs to the actor runtime (its section "
        "in this file). Between commands, `runtime.failure` once cost about 1.2 ms (a Thespian `listen` "
        "before every WHATS_NEXT); it now polls at most every 0.1 s, which is why result answered -> "
        "next WHATS_NEXT matches servox's."
    ),
    "cancel_to_cancelled_p99_ms": (
        "**What bounds cancel reply -> `cancelled`.** `OperationPath.cancel` sends the supervisor its "
        "`Cancel`, waits only until the supervisor confirms the kills went out (the cancelled "
        "operation's result, sent right after the SIGKILLs), lets the runner post `cancelled`, and then waits for the "
        "fresh connectors before it polls again. So this figure is one supervisor round trip plus one "
        "HTTP post. Before that change the runner posted only after every connector had been "
        "respawned and had answered: p50 45-57 ms, p99 68-145 ms at load averages 1.5-5, against "
        "p50 3.5-4.0 ms, p99 6.5-25 ms after it. Cancel reply -> next WHATS_NEXT is the respawn of "
        "the 4 connectors (see the actor runtime's section) and did not change."
    ),
    "idle_cpu_percent": (
        "**What the idle CPU is made of.** Wakeups. The servo's main thread sleeps on events during "
        "a SLEEP (a signal through a wake pipe, the death of the supervisor, admin or logger through "
        "pidfds) and wakes on its own only when the watchdog must look: once every "
        "`supervisor.liveness.idle_interval` (5 s) while idle, to send a ping and read its answer "
        "(issue 24; before, every `liveness.interval`, 1 s: 0.48-0.50 % in all). The supervisor ticks "
        "as rarely when idle (it checks that the owner and every child are alive; a death wakes it "
        "at once through Thespian's notice), and each connector host checks its parent every 10 s "
        "as a fallback to the kernel's parent-death signal (2 s before). The price: a supervisor "
        "that hangs during a SLEEP is noticed within `idle_interval + timeout` (10 s) instead of 6 s, "
        "and a restart during a SLEEP shows in /metrics within 5 s. About 0.35 ms of any wakeup is "
        "Thespian's own; its admin and logger do not wake at all. servox's one process used no CPU "
        "during its SLEEP: its scheduler time did not move by a single nanosecond."
    ),
}
