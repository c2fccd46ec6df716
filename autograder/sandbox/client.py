"""The judge's side of a worker: send a request, wait at most `timeout`, check the seal, read the reply.

Every reply carries the guard's ledger for that request; the judge reads what it decides from there
(`reply["record"]`), never from the payload the worker's code produced. Evidence that student code
reached for the grader's observers (`tamper`) or computed outside them (`unobserved`) is kept on the
Worker for the whole session.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time

from autograder.sandbox import protocol

STDERR_TAIL = 4000   # characters of the student's output kept for messages
EXIT_TAMPER = 86     # guard.EXIT_TAMPER: the worker ended itself after sealing tamper evidence


class WorkerLost(Exception):
    """The worker timed out, died, or broke the protocol. `reason` is student-facing."""

    def __init__(self, reason: str, kind: str):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind   # "timeout" | "died" | "protocol" | "tamper"


class Worker:
    """The judge's end of one worker process: requests with a deadline, the student's output, the kill.

    Workers are made by `slot.Slot` (the only way student code starts); `_attach` takes the process's
    pipes and the worker's key, and waits for the worker's sealed hello.
    """

    def _attach(self, proc, key: bytes, startup_timeout: float, output_limit: int | None):
        self.proc, self.key, self.seq = proc, key, 0
        self.tamper: list[str] = []          # evidence, for the whole session
        self.unobserved: list[str] = []
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

    def request(self, message: "protocol.Request | dict | None", timeout: float) -> dict:
        """Send `message` (None: just read) and return the reply, or raise WorkerLost."""
        try:
            return self._request(message, timeout)
        except WorkerLost:
            if self._over:
                mb = self.output_limit / 1024 ** 2
                raise WorkerLost(f"it printed more than {mb:g} MB of output and was stopped "
                                 f"(remove large or looping print calls)", "died") from None
            raise

    def _request(self, message: "protocol.Request | dict | None", timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        try:
            if message is not None:
                self.proc.stdin.write(protocol.encode(message))
                self.proc.stdin.flush()
            size = int.from_bytes(self._read(4, deadline), "big")
            if size > protocol.MAX_FRAME:
                raise WorkerLost("the worker sent a reply too large to read", "protocol")
            reply, ledger = protocol.open_reply(self._read(size, deadline), self.key, self.seq)
        except TimeoutError:
            self.kill()
            raise WorkerLost(f"it did not finish within {timeout:g} s (an infinite loop, or very slow code?)",
                             "timeout") from None
        except (EOFError, BrokenPipeError, ConnectionResetError, ValueError):    # ValueError: a closed pipe
            code = self.kill()
            raise WorkerLost(_death_reason(code), "died") from None
        except protocol.ForgedReply as e:         # (checked before anything of the body is read)
            self.kill()
            self.tamper.append(str(e))
            raise WorkerLost(f"something wrote {e}", "tamper") from None
        except WorkerLost:
            self.kill()
            raise
        except Exception as e:  # an undecodable frame
            self.kill()
            raise WorkerLost(f"the worker's reply could not be read ({type(e).__name__})", "protocol") from None
        self.seq += 1
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerLost("the worker sent a malformed reply", "protocol")
        self._take(ledger)
        reply["record"] = {"functions": list(ledger["functions"]), "ops": sorted(ledger["ops"]),
                           "counts": dict(ledger["ops"]), "op_count": ledger["op_count"], "flops": ledger["flops"],
                           "grad_ops": ledger["grad_ops"], "numpy": ledger["numpy"],
                           "events": [(protocol._unpack(p), flops) for p, flops in ledger["events"]],
                           "unobserved": list(ledger["unobserved"])}
        if reply.get("kind") == "tamper":
            self.kill()
        return reply

    def _take(self, ledger: dict):
        for e in ledger.get("tamper", []):
            if e not in self.tamper:
                self.tamper.append(e)
        for e in ledger.get("unobserved", []):
            if e not in self.unobserved:
                self.unobserved.append(e)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
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
        if sig == "SIGSYS":
            return "the process running your code was stopped for a forbidden system call"
        return f"the process running your code was killed by {sig}"
    if code == EXIT_TAMPER:
        return "the process running your code ended after reaching for the grader's own objects"
    return f"the process running your code exited with status {code} (sys.exit or os._exit in your code?)"


def clean_env() -> dict:
    """A minimal environment: no PYTHONPATH or other variables that would change imports."""
    keep = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONHASHSEED="0")
    return env
