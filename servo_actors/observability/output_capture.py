"""A connector's stdout and stderr as log lines that name it, bounded in length and in rate.

In a connector's host process, ``OutputCapture.start()`` points file descriptors 1 and 2 at two
pipes that one thread of that process reads. Whatever is written there (``print()``,
``sys.stderr``, ``os.write(1, ...)``, a subprocess the connector started, C code) becomes log
records of the loggers ``stdout`` and ``stderr``: in a host, every record carries the connector's
name (``log_relay.tag_records``), so the servo's log names it in either format, and nothing raw
reaches the servo's output. Bounds, each a constant here:

- a line longer than ``MAX_LINE_BYTES`` is cut there, and says how many bytes were cut (what
  follows up to its newline is read and dropped, never held);
- at most ``LINES_PER_WINDOW`` lines are logged per ``WINDOW_SECONDS``; past that, lines are read
  and dropped (a writer never blocks on a full pipe): a note says so at the first one dropped, and
  another, when the window ends, how many lines and bytes were dropped;
- a line with no newline yet is logged after ``PARTIAL_LINE_WAIT`` seconds of quiet (a prompt, a
  progress bar), so it is not held back until the process ends.

The thread only reads and logs: it never writes to descriptors 1 or 2 itself. Whoever logs in
this process must not write to them either (``log_relay`` writes to a copy of the original
stderr, made before ``start``). A line still in a pipe when the process is killed is lost.

::

    OutputCapture().start()          # in the host, after log_relay.tag_records
    print("hello")                   # -> a log line: [name] stdout: hello
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "LINES_PER_WINDOW",
    "MAX_LINE_BYTES",
    "OutputBudget",
    "OutputCapture",
    "PARTIAL_LINE_WAIT",
    "READ_CHUNK_BYTES",
    "STREAMS",
    "WINDOW_SECONDS",
    "LineSplitter",
]

MAX_LINE_BYTES = 2000
"""Longest line logged from a connector's output; the rest of a longer line is cut (and counted)."""
LINES_PER_WINDOW = 200
"""Most lines of a connector's output (stdout and stderr together) logged per window."""
WINDOW_SECONDS = 10.0
"""The window of ``LINES_PER_WINDOW``: a flood costs the servo's log at most that many lines of at
most ``MAX_LINE_BYTES`` each per this many seconds, and one note of what was dropped."""
PARTIAL_LINE_WAIT = 1.0
"""Seconds of quiet after which a line with no newline yet is logged as it is."""
READ_CHUNK_BYTES = 64 * 1024
"""How much the thread reads from a pipe at once."""
STREAMS = {1: "stdout", 2: "stderr"}
"""The descriptors captured and the logger each one's lines go to."""


@dataclass
class LineSplitter:
    """Bytes of one stream in, complete lines out: each cut at ``max_bytes``, with the number of
    bytes cut; at most ``max_bytes`` of a line are ever held."""

    max_bytes: int = MAX_LINE_BYTES
    _held: bytearray = field(default_factory=bytearray)
    _cut: int = 0

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        """The lines ``chunk`` completes, each as ``(text, bytes cut)``."""
        lines: list[tuple[bytes, int]] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._hold(piece)
            if end < 0:
                break
            lines.append(self.take())
            start = end + 1
        return lines

    @property
    def pending(self) -> bool:
        """Whether part of a line is held (or was cut) with no newline yet."""
        return bool(self._held) or self._cut > 0

    def take(self) -> tuple[bytes, int]:
        """The line held so far, ended here."""
        line, cut = bytes(self._held), self._cut
        self._held.clear()
        self._cut = 0
        return line, cut

    def _hold(self, piece: bytes) -> None:
        room = self.max_bytes - len(self._held)
        self._held += piece[: max(0, room)]
        self._cut += max(0, len(piece) - room)


@dataclass
class OutputBudget:
    """How many lines may be logged now: ``lines`` per ``window`` seconds (the clock is passed in)."""

    lines: int = LINES_PER_WINDOW
    window: float = WINDOW_SECONDS
    _started: float | None = None
    _logged: int = 0
    dropped_lines: int = 0
    dropped_bytes: int = 0

    def admit(self, now: float, size: int) -> bool:
        """Whether a line of ``size`` bytes may be logged at ``now`` (if not, it is counted)."""
        if self._started is None or now - self._started >= self.window:
            self._started, self._logged = now, 0
        if self._logged < self.lines:
            self._logged += 1
            return True
        self.dropped_lines += 1
        self.dropped_bytes += size
        return False

    def window_end(self) -> float | None:
        """When the window in which lines were dropped ends (None: none dropped)."""
        if not self.dropped_lines or self._started is None:
            return None
        return self._started + self.window

    def take_dropped(self, now: float) -> tuple[int, int] | None:
        """``(lines, bytes)`` dropped in a window that is over at ``now``, counted afresh after."""
        end = self.window_end()
        if end is None or now < end:
            return None
        dropped = (self.dropped_lines, self.dropped_bytes)
        self.dropped_lines = self.dropped_bytes = 0
        return dropped


class OutputCapture:
    """Descriptors 1 and 2 of this process become pipes read by one thread, which logs their lines
    (see the module docstring). ``start`` once per process; the thread ends with the process."""

    def __init__(
        self,
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        lines_per_window: int = LINES_PER_WINDOW,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_line_bytes = max_line_bytes
        self._budget = OutputBudget(lines_per_window, window)
        self._clock = clock
        self._splitters = {name: LineSplitter(max_line_bytes) for name in STREAMS.values()}
        self._loggers = {name: logging.getLogger(name) for name in STREAMS.values()}
        # Beside the "stdout" and "stderr" loggers of the lines themselves: "output" says what
        # became of them (lines dropped over the rate budget), under a name a reader filters on.
        self._note = logging.getLogger("output")
        self._quiet_since: dict[str, float] = {}

    def start(self) -> None:
        """Point descriptors 1 and 2 at the pipes and start the thread reading them."""
        with contextlib.suppress(ValueError, OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        readers: dict[int, str] = {}
        for fd, name in STREAMS.items():
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            readers[read] = name
        # sys.stdout and sys.stderr write to the descriptors (whatever they were made before: a
        # test's capture), one write per line: a print() reaches the pipe at once.
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        thread = threading.Thread(target=self._read, args=(readers,), name="connector-output", daemon=True)
        thread.start()

    def _read(self, readers: dict[int, str]) -> None:
        selector = selectors.DefaultSelector()
        for fd, name in readers.items():
            selector.register(fd, selectors.EVENT_READ, name)
        while selector.get_map():
            for key, _ in selector.select(self._next_wait()):
                name = key.data
                try:
                    chunk = os.read(key.fd, READ_CHUNK_BYTES)
                except OSError:
                    chunk = b""
                if not chunk:  # every writer closed it (only at the process's end)
                    selector.unregister(key.fd)
                    if self._splitters[name].pending:
                        self._emit(name, *self._splitters[name].take())
                    continue
                for line, cut in self._splitters[name].feed(chunk):
                    self._emit(name, line, cut)
                self._quiet_since[name] = self._clock()
            self._flush_quiet_partials()
            self._report_dropped()

    def _next_wait(self) -> float | None:
        """How long the thread may wait for output: until a quiet partial line or a window with
        dropped lines is due, else for ever."""
        now = self._clock()
        due = [
            self._quiet_since.get(name, now) + PARTIAL_LINE_WAIT
            for name, splitter in self._splitters.items()
            if splitter.pending
        ]
        end = self._budget.window_end()
        if end is not None:
            due.append(end)
        return max(0.0, min(due) - now) if due else None

    def _flush_quiet_partials(self) -> None:
        now = self._clock()
        for name, splitter in self._splitters.items():
            if splitter.pending and now - self._quiet_since.get(name, now) >= PARTIAL_LINE_WAIT:
                self._emit(name, *splitter.take())

    def _emit(self, name: str, line: bytes, cut: int) -> None:
        self._report_dropped()  # a window with drops that is over is said before the next one
        now = self._clock()
        budget = self._budget
        first_drop = budget.dropped_lines == 0
        if not budget.admit(now, len(line) + cut + 1):
            if first_drop:
                self._note.warning(
                    "stdout and stderr over %d lines per %gs: further lines are dropped until the"
                    " window ends",
                    budget.lines,
                    budget.window,
                )
            return
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        if cut:
            text += f" [line cut at {self._max_line_bytes} bytes: {cut} more bytes dropped]"
        self._loggers[name].info("%s", text)

    def _report_dropped(self) -> None:
        dropped = self._budget.take_dropped(self._clock())
        if dropped is not None:
            lines, size = dropped
            self._note.warning(
                "dropped %d lines (%d bytes) of stdout and stderr over the limit of %d lines per %gs",
                lines,
                size,
                self._budget.lines,
                self._budget.window,
            )
