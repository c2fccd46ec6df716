"""The judge's side of a worker: start it, send a request, wait at most `timeout`, read the reply."""
from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

from . import protocol

WORKER_SOURCE = (Path(__file__).with_name("worker.py")).read_text()
STDERR_TAIL = 4000   # characters of the student's output kept for messages


class WorkerLost(Exception):
    """The worker timed out, died, or broke the protocol. `reason` is student-facing."""

    def __init__(self, reason: str, kind: str):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind   # "timeout" | "died" | "protocol"


class Worker:
    """The judge's end of one worker process: requests with a deadline, the student's output, the kill.

    Workers are made by `sandbox.Slot` (the only way student code starts); `_attach` takes the
    process's pipes and waits for the worker's hello.
    """

    def _attach(self, proc, startup_timeout: float, output_limit: int | None):
        """Start reading the student's output of `proc` and wait for the worker's hello."""
        self.proc = proc
        self.output_limit, self._output_bytes, self._over = output_limit, 0, False
        self._tail = bytearray()
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        hello = self.request(None, startup_timeout)
        if not hello.get("ready"):
            raise WorkerLost("the worker did not start", "protocol")

    def _read_stderr(self):
        # Keep only a tail: a submission printing 100 MB must not fill memory or block the pipe.
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self._output_bytes += len(chunk)
            self._tail += chunk
            if len(self._tail) > 2 * STDERR_TAIL:
                del self._tail[:-STDERR_TAIL]
            if self.output_limit is not None and self._output_bytes > self.output_limit and not self._over:
                self._over = True
                self.proc.kill()

    def output_tail(self) -> str:
        return bytes(self._tail[-STDERR_TAIL:]).decode("utf-8", "replace")

    def _read(self, n: int, deadline: float) -> bytes:
        data = b""
        fd = self.proc.stdout.fileno()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n - len(data), 1 << 20))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def request(self, message: dict | None, timeout: float) -> dict:
        """Send `message` (None: just read) and return the reply, or raise WorkerLost."""
        try:
            return self._request(message, timeout)
        except WorkerLost:
            if self._over:
                mb = self.output_limit / 1024 ** 2
                raise WorkerLost(f"it printed more than {mb:g} MB of output and was stopped "
                                 f"(remove large or looping print calls)", "died") from None
            raise

    def _request(self, message: dict | None, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        try:
            if message is not None:
                self.proc.stdin.write(protocol.encode(message))
                self.proc.stdin.flush()
            (size,) = struct.unpack(">I", self._read(4, deadline))
            if size > protocol.MAX_FRAME:
                raise WorkerLost("the worker sent a reply too large to read", "protocol")
            reply = protocol.decode(self._read(size, deadline))
        except TimeoutError:
            self.kill()
            raise WorkerLost(f"it did not finish within {timeout:g} s (an infinite loop, or very slow code?)",
                             "timeout") from None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self.kill()
            raise WorkerLost(_death_reason(code), "died") from None
        except WorkerLost:
            self.kill()
            raise
        except Exception as e:  # undecodable frame
            self.kill()
            raise WorkerLost(f"the worker's reply could not be read ({type(e).__name__})", "protocol") from None
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerLost("the worker sent a malformed reply", "protocol")
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _stop(self):
        """Kill the worker and everything it started (the fork server kills its session and uid)."""
        self.proc.kill()

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self._stop()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self._drain.join(timeout=2)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass
        return code

    def close(self):
        self.kill()


def _death_reason(code: int | None) -> str:
    if code is None:
        return "the process running your code stopped responding"
    if code < 0:
        sig = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        if sig == "SIGKILL":
            return "the process running your code was killed (SIGKILL), usually by running out of memory"
        return f"the process running your code was killed by {sig}"
    return f"the process running your code exited with status {code} (sys.exit or os._exit in your code?)"


def clean_env() -> dict:
    """A minimal environment: no PYTHONPATH or other variables that would change imports."""
    keep = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONHASHSEED="0")
    return env
