"""Grading slots: the one way student code is started to be graded, on every path.

`course grade`, `course grade-class` (one slot per lane), Gradescope's run_autograder, nbgrader's
autograde and the pytest plugin all grade through a `Slot`. A slot runs a fork server (forkserver.py,
which imports torch and installs the guard once) and forks one worker per need.

Isolation, in order of preference:
- "bwrap": the fork server runs under bubblewrap (bwrap.py): a user namespace with no capability, uid
  65534, no network, only the Python install and the slot's current submission (read-only, at
  /submission), an empty size-limited /tmp, its own /proc. Nothing of the course repository is mounted.
- "rlimits": where bubblewrap cannot run. When the grader is root, each worker becomes the slot's own
  unprivileged uid (claimed with an flock, so no two graders share one) with no capability; a Python
  install that uid cannot read is reached through folders opened before the switch (confine.py), never
  through a kept capability. When the grader is not root, workers run as the grader's own user: the
  report says the code was NOT isolated.
In both modes every worker gets resource limits and the worker syscall filter (no processes, threads,
sockets, file writes, ptrace; signals to itself only), so a slot holds at most the fork server and one
worker, and writes nothing to disk.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import bwrap, client
from autograder.sandbox.client import Worker

HERE = Path(__file__).resolve().parent
SERVER_SOURCE = "\n".join((HERE / f).read_text() for f in ("confine.py", "guard.py", "worker.py", "forkserver.py"))
CONFINE_SOURCE = (HERE / "confine.py").read_text()
BASE_UID = 61000          # slots run student code as uids from BASE_UID up when the grader is root
UID_RANGE = 4096


@dataclass(frozen=True)
class Limits:
    memory: int = 1024 ** 3            # bytes of address space above the fork server's own (checks use MBs)
    cpu: int = 400                     # CPU seconds per worker process
    nofile: int = 256
    fsize: int = 16 * 1024 ** 2        # largest file a worker may write (it may write none: belt and braces)
    output: int = 8 * 1024 ** 2        # bytes of stdout+stderr before the worker is stopped
    tmp: int = 16 * 1024 ** 2          # size of the fork server's private /tmp (bubblewrap)

    def rlimits(self) -> dict:
        return {"memory": self.memory, "cpu": self.cpu, "nofile": self.nofile, "fsize": self.fsize, "core": 0}


@dataclass
class Sandbox:
    """How workers are isolated on this machine. mode: "bwrap" or "rlimits"."""
    mode: str
    why_not: str = ""
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def detect(cls, want: str = "auto", limits: Limits | None = None) -> "Sandbox":
        limits = limits or Limits()
        if want == "rlimits":
            return cls("rlimits", "the sandbox was switched off (--sandbox rlimits)", limits)
        ok, why = bwrap.works()
        if ok:
            return cls("bwrap", "", limits)
        if want == "bwrap":
            raise RuntimeError(f"--sandbox bwrap was asked for, but {why}")
        return cls("rlimits", why, limits)

    @property
    def isolated(self) -> bool:
        return self.mode == "bwrap"

    @property
    def note(self) -> str:
        """What every report must say about isolation: nothing when it worked."""
        if self.isolated:
            return ""
        who = "an unprivileged user, " if os.geteuid() == 0 else ""
        if files_restricted():
            return (f"Sandbox: NOT isolated in namespaces ({self.why_not}); resource limits, {who}a system-call "
                    f"filter, Landlock (files: the Python install and your submission only) and the grader's "
                    f"observers.")
        return (f"Sandbox: NOT isolated ({self.why_not}); resource limits, {who}a system-call filter and the "
                f"grader's observers only. Your code could read files of the grading machine that every user "
                f"may read.")


def files_restricted() -> bool:
    """Does this kernel have Landlock, so workers see only the Python install and the submission?"""
    from autograder.sandbox.confine import landlock_abi
    return landlock_abi() > 0


class _RemoteProc:
    """Enough of subprocess.Popen for client.Worker: pipes to a worker the fork server forked."""

    def __init__(self, slot: "Slot", wid: int, stdin, stdout, stderr):
        self.slot, self.id = slot, wid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.pid = None

    def poll(self):
        return self.slot.status(self.id)

    def wait(self, timeout=None):
        if not self.slot.wait_exit(self.id, timeout):
            raise subprocess.TimeoutExpired("worker", timeout)
        return self.slot.status(self.id)

    def kill(self):
        self.slot.kill(self.id)


class ForkedWorker(Worker):
    """A client.Worker whose process is forked by a slot's fork server."""

    def __init__(self, slot: "Slot", folders: list[str], cwd: str, env: dict, startup_timeout: float,
                 preload: tuple[str, ...] = ()):
        self.slot = slot
        key = secrets.token_bytes(32)
        self._attach(slot.spawn(folders, cwd, env, key, preload), key, startup_timeout, slot.sandbox.limits.output)


class Slot:
    """One parallel grading lane: a fork server (sandboxed when possible) and its private folders."""

    def __init__(self, index: int, root: Path, sandbox: Sandbox, startup_timeout: float = 90.0):
        self.index, self.sandbox, self.startup_timeout = index, sandbox, startup_timeout
        self.root = Path(root) / f"slot{index}"
        self.sub = self.root / "submission"
        for d in (self.root, self.sub):
            d.mkdir(parents=True, exist_ok=True)
        self.drop_uid, self._uid_lock = (_claim_uid(index) if os.geteuid() == 0 and sandbox.mode != "bwrap"
                                         else (None, None))
        if self.drop_uid is not None:      # only this slot's uid may read its submission
            os.chown(self.root, 0, self.drop_uid)
            os.chown(self.sub, 0, self.drop_uid)
        os.chmod(self.root, 0o750 if self.drop_uid is not None else 0o755)
        self._start_server()

    def _start_server(self):
        """The fork server (again, when one has died: the next worker then comes from a fresh one)."""
        sandbox = self.sandbox
        self._cond = threading.Condition()
        self._status: dict[int, int | None] = {}
        self._next = 0
        self._ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conf = json.dumps({"drop_uid": self.drop_uid})
        if sandbox.mode == "bwrap":
            prefix = bwrap.command([("ro", self.sub, Path("/submission"))], "/tmp", tmp_bytes=sandbox.limits.tmp)
            cwd = None
        else:
            prefix, cwd = [], str(self.root)
        # Started now, waited for at the first spawn: the judge imports torch meanwhile.
        self.server = subprocess.Popen(
            [*prefix, sys.executable, "-I", "-B", "-c", SERVER_SOURCE, str(theirs.fileno()), conf],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=client.clean_env(), start_new_session=True, cwd=cwd)
        theirs.close()
        self._reader: threading.Thread | None = None

    def _wait_ready(self):
        if self._reader is not None:
            return
        self._ctrl.settimeout(self.startup_timeout)
        try:
            ready = self._ctrl.recv(1 << 16)
        except OSError:
            ready = b""
        if not ready:
            err = self.server.stderr.read().decode(errors="replace")[-2000:] if self.server.poll() is not None else ""
            self.close()
            raise RuntimeError(f"the fork server of slot {self.index} did not start: {err}")
        self._ctrl.settimeout(None)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # ---- messages from the server -----------------------------------------------------------
    def _read(self):
        while True:
            try:
                data = self._ctrl.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            msg = json.loads(data)
            with self._cond:
                if msg["op"] == "exited":
                    self._status[msg["id"]] = msg["status"]
                self._cond.notify_all()
        with self._cond:     # server gone: every worker is gone with it
            for wid in self._status:
                if self._status[wid] is None:
                    self._status[wid] = -9
            self._cond.notify_all()

    def status(self, wid: int):
        with self._cond:
            return self._status.get(wid)

    def wait_exit(self, wid: int, timeout) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._status.get(wid) is not None, timeout)

    def kill(self, wid: int):
        try:
            self._ctrl.send(json.dumps({"op": "kill", "id": wid}).encode())
        except OSError:
            pass

    # ---- workers ------------------------------------------------------------------------------
    def reset(self, folder: Path):
        """Make the slot hold exactly this submission (regular files only, never a link)."""
        _wipe(self.sub, self.root)
        for f in sorted(Path(folder).iterdir()):
            if f.is_file() and not f.is_symlink():
                fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as src, open(self.sub / f.name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.chmod(self.sub / f.name, 0o640 if self.drop_uid is not None else 0o644)
                if self.drop_uid is not None:
                    os.chown(self.sub / f.name, 0, self.drop_uid)
        os.chmod(self.sub, 0o750 if self.drop_uid is not None else 0o755)

    def spawn(self, folders: list[str], cwd: str, env: dict, key: bytes, preload: tuple[str, ...] = ()) -> _RemoteProc:
        """Fork a worker; `preload`: modules the server imports first, once (torch._dynamo: optimizers need it)."""
        self._wait_ready()
        with self._cond:
            wid = self._next
            self._next += 1
            self._status[wid] = None
        pipes = [os.pipe() for _ in range(3)]            # (read, write) each
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        msg = {"op": "spawn", "id": wid, "key": key.hex(), "folders": folders, "cwd": cwd, "env": env,
               "limits": self.sandbox.limits.rlimits(), "preload": list(preload)}
        try:
            socket.send_fds(self._ctrl, [json.dumps(msg).encode()], theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        return _RemoteProc(self, wid, os.fdopen(pipes[0][1], "wb"), os.fdopen(pipes[1][0], "rb", buffering=0),
                           os.fdopen(pipes[2][0], "rb"))

    def worker_factory(self):
        """A grade() worker_factory: copy the prepared folder into the slot, fork a worker there."""
        def factory(folders: list[Path], preload: tuple[str, ...] = ()) -> Worker:
            self.reset(folders[0])
            env = client.clean_env()
            if self.sandbox.mode == "bwrap":
                inner, cwd = ["/submission"], "/tmp"
            else:
                inner, cwd = [str(self.sub)], str(self.sub)
            env.update(HOME=cwd, TMPDIR=cwd)
            if not self.alive():          # a server that died between two workers is replaced, not blamed
                self._stop_server()
                self._start_server()
            return ForkedWorker(self, inner, cwd, env, self.startup_timeout, preload)
        return factory

    def alive(self) -> bool:
        return self.server.poll() is None

    def close(self):
        self._stop_server()
        if self._uid_lock is not None:          # every process of that uid is gone: free it
            os.close(self._uid_lock)
            self._uid_lock = None

    def _stop_server(self):
        try:     # shutdown first: it wakes the reader thread and the server sees the end at once
            self._ctrl.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._ctrl.close()
        except OSError:
            pass
        if self._reader is None:      # never used: no worker to wait for
            self.server.kill()
        try:
            self.server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait(timeout=5)
        if self.server.stderr:
            self.server.stderr.close()


def _claim_uid(index: int) -> tuple[int, int]:
    """An unprivileged uid that no other grader on this machine holds (an flock held for the slot's life).
    Returns (uid, the lock's fd)."""
    folder = Path(tempfile.gettempdir()) / "course-grader-uids"
    folder.mkdir(mode=0o700, exist_ok=True)
    for k in range(UID_RANGE):
        uid = BASE_UID + (index + k) % UID_RANGE
        fd = os.open(folder / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except OSError:
            os.close(fd)
    raise RuntimeError(f"every grading uid from {BASE_UID} to {BASE_UID + UID_RANGE - 1} is in use")


def _wipe(path: Path, inside: Path):
    """Empty `path`, which must be a folder inside this batch's own temporary folder."""
    path, inside = Path(path).resolve(), Path(inside).resolve()
    tmp = Path(tempfile.gettempdir()).resolve()
    if not (path.is_relative_to(inside) and inside.is_relative_to(tmp) and path != inside
            and len(path.parts) > len(tmp.parts) + 1 and ".batch-" in str(path)):
        raise RuntimeError(f"refusing to empty {path}: not a batch grading folder under {tmp}")
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            try:
                child.unlink()
            except OSError:
                pass


@contextmanager
def open_slot(sandbox: str | Sandbox = "auto", startup_timeout: float = 90.0):
    """One slot in its own temporary folder, for grading one submission (or several, one at a time)."""
    box = sandbox if isinstance(sandbox, Sandbox) else Sandbox.detect(sandbox)
    root = make_root()
    slot = None
    try:
        slot = Slot(0, root, box, startup_timeout)
        yield slot
    finally:
        if slot is not None:
            slot.close()
        remove_root(root)


def make_root() -> Path:
    """This batch's private temporary folder (slot folders live inside)."""
    root = Path(tempfile.mkdtemp(prefix="course.batch-"))
    os.chmod(root, 0o711)
    return root


def remove_root(root: Path):
    root = Path(root).resolve()
    tmp = Path(tempfile.gettempdir()).resolve()
    if root.parent == tmp and root.name.startswith("course.batch-"):
        shutil.rmtree(root, ignore_errors=True)
    else:
        raise RuntimeError(f"refusing to remove {root}: not a batch grading folder")
