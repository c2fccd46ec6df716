"""A progress bar on stderr: counts, elapsed time, time left. Plain lines when stderr is not a TTY."""
from __future__ import annotations

import sys
import threading
import time


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds // 60 % 60:02d}"


class Progress:
    def __init__(self, total: int, label: str = "grading", stream=None, width: int = 30):
        self.total, self.label, self.width = total, label, width
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.full = self.zero = 0
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._last_step = -1

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        filled = int(self.width * self.done / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        left_s = _clock(left) if self.done else "?"
        return (f"{self.label} [{bar}] {self.done}/{self.total}  full marks {self.full}, zero {self.zero}  "
                f"elapsed {_clock(elapsed)}  left ~{left_s}")

    def update(self, score: int | None = None, max_score: int | None = None):
        with self._lock:
            self.done += 1
            if score is not None and max_score and score == max_score:
                self.full += 1
            if not score:
                self.zero += 1
            if self.tty:
                self.stream.write("\r" + self.line())
                if self.done == self.total:
                    self.stream.write("\n")
            else:   # a line per 10% (and the last), so logs stay short
                step = self.done * 10 // max(self.total, 1)
                if step != self._last_step or self.done == self.total:
                    self._last_step = step
                    self.stream.write(self.line() + "\n")
            self.stream.flush()
