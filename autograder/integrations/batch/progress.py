"""The batch grader's progress bar (tqdm, on stderr), with how many students got full marks and zero so far.
When stderr is not a terminal the same line is written once per tenth of the class, so logs stay short."""
from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm

FORMAT = "{desc} [{bar:30}] {n_fmt}/{total_fmt}{postfix}  elapsed {elapsed}  left ~{remaining}"


class Progress:
    def __init__(self, total: int, label: str = "grading", stream=None):
        self.stream = stream or sys.stderr
        self.total, self.label = total, label
        self.full = self.zero = self.done = 0
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._last_tenth = -1
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = tqdm(total=total, desc=label, file=self.stream, unit="student", bar_format=FORMAT,
                        ascii=".#", dynamic_ncols=True) if tty else None

    def _counts(self) -> str:
        return f"full marks {self.full}, zero {self.zero}"

    def line(self) -> str:
        return tqdm.format_meter(self.done, self.total, time.monotonic() - self.start, prefix=self.label,
                                 bar_format=FORMAT, postfix=self._counts(), ascii=".#")

    def update(self, score: int | None = None, max_score: int | None = None):
        with self._lock:
            self.done += 1
            if score is not None and max_score and score == max_score:
                self.full += 1
            if not score:
                self.zero += 1
            if self.bar is not None:
                self.bar.set_postfix_str(self._counts(), refresh=False)
                self.bar.update(1)
                if self.done == self.total:
                    self.bar.close()
                return
            tenth = self.done * 10 // max(self.total, 1)
            if tenth != self._last_tenth or self.done == self.total:
                self._last_tenth = tenth
                self.stream.write(self.line() + "\n")
                self.stream.flush()
