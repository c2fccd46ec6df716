"""The one way student code is started, on every path: a fork server per slot, a forked worker per need.

`course grade`, `course grade-class` (one slot per lane), Gradescope's run_autograder, nbgrader's
autograde and the pytest plugin all grade through a `Slot`; nothing else starts student code.

Isolation, on Linux with bubblewrap: the fork server of a slot runs under `bwrap` and sees only the
Python install and virtualenv (read-only), the slot's current submission at /submission
(read-only), a private /tmp, /usr, /proc and /dev; no network, no other namespace shared with the
host. Nothing of the course repository (solutions/, the checks, other students, gradebooks) is
mounted. Where bubblewrap cannot run, the same fork server runs unsandboxed and only the resource
limits apply; `Sandbox.mode` and `Sandbox.note` say so, and grade() writes the note into the result.

Every forked worker gets: a new session, RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_NOFILE,
RLIMIT_FSIZE, no core files, and (when the grader runs as root) its own unprivileged uid per slot,
which makes RLIMIT_NPROC count only that slot and lets the server kill every process the worker
left behind (confine.py). Output beyond `output_limit` bytes ends the worker with a message.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import client
from .client import Worker

HERE = Path(__file__).resolve().parent
CONFINE_SOURCE = (HERE / "confine.py").read_text()
SERVER_SOURCE = CONFINE_SOURCE + "\n" + (HERE / "forkserver.py").read_text()
BASE_UID = 61000          # slots run student code as uids from BASE_UID up when the grader is root
UID_RANGE = 4096


@dataclass(frozen=True)
class Limits:
    memory: int = 1024 ** 3            # bytes of address space above the fork server's own (checks use MBs)
    cpu: int = 400                     # CPU seconds per worker process
    nproc: int = 32                    # processes and threads per slot
    nofile: int = 256
    fsize: int = 16 * 1024 ** 2        # largest file a worker may write
    output: int = 8 * 1024 ** 2        # bytes of stdout+stderr before the worker is stopped

    def rlimits(self, drop_uid: bool, in_userns: bool) -> dict:
        d = {"memory": self.memory, "cpu": self.cpu, "nofile": self.nofile, "fsize": self.fsize, "core": 0}
        if drop_uid or in_userns:
            d["nproc"] = self.nproc
        else:   # the user's own count is shared with the rest of the machine: allow some headroom
            d["nproc"] = _user_process_count() + self.nproc
        return d


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if p.stat().st_uid == uid:
                n += 1
        except OSError:
            pass
    return n


def bwrap_works() -> tuple[bool, str]:
    """Can bubblewrap build the sandbox here? (False, why) on macOS or without user namespaces."""
    if sys.platform != "linux":
        return False, f"bubblewrap needs Linux (this is {sys.platform})"
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bubblewrap (bwrap) is not installed"
    cmd = [exe, *_namespace_args(), "--new-session", "--ro-bind", "/", "/", "true"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap could not start ({e})"
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        return False, f"bwrap cannot create namespaces here ({why[-1] if why else r.returncode})"
    return True, ""


def _namespace_args(uid_drop: bool = True) -> list[str]:
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent"]
    if os.geteuid() != 0:
        args += ["--unshare-user"]
    elif uid_drop:
        # No user namespace, so the fork server can give each worker a real unprivileged uid.
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return args


def _python_dirs() -> list[Path]:
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent}
    out: list[Path] = []
    for d in sorted(dirs, key=lambda p: len(p.parts)):
        if not any(d.is_relative_to(o) for o in out) and d != Path("/"):
            out.append(d)
    # The venv keeps its own path (its python is a symlink into base_prefix); bind it as given too.
    venv = Path(sys.prefix)
    if venv.resolve() != venv and venv not in out:
        out.append(venv)
    return out


def bwrap_args(tmp: Path | None, binds: list[tuple[str, Path, Path]], chdir: str, uid_drop: bool = True) -> list[str]:
    """A bubblewrap command prefix: no network and no shared namespaces; /usr, the libraries and the
    Python install read-only; a private /tmp (`tmp` bound there, or an empty tmpfs); then `binds`
    (("ro" | "rw", source, target)). Nothing else of the host is visible."""
    args = ["bwrap", *_namespace_args(uid_drop), "--new-session", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    # The private /tmp goes first: a Python environment or folder that lives under /tmp (a CI
    # checkout there) is then bound over it below, instead of being hidden by it.
    args += ["--bind", str(tmp), "/tmp"] if tmp is not None else ["--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/usr"), Path("/tmp")}
    mounts = [("ro", d, d) for d in _python_dirs() if not d.is_relative_to("/usr")] + list(binds)
    for mode, source, target in mounts:
        target = Path(target)
        for parent in reversed(target.parents):
            if parent not in made:
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind" if mode == "ro" else "--bind", str(source), str(target)]
        made.add(target)
    return args + ["--proc", "/proc", "--dev", "/dev", "--chdir", chdir]


def bwrap_prefix(sub: Path, tmp: Path) -> list[str]:
    """The fork server's sandbox: the slot's submission read-only at /submission, its own /tmp."""
    return bwrap_args(tmp, [("ro", sub, Path("/submission"))], "/tmp")


def mounts_under_tmp(tmp: Path) -> set[Path]:
    """Where the slot's private /tmp holds mount points of the Python environment (kept by reset)."""
    return {Path(tmp).resolve() / d.relative_to("/tmp") for d in _python_dirs() if d.is_relative_to("/tmp")}


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
        ok, why = bwrap_works()
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
        return (f"Sandbox: NOT isolated ({self.why_not}); resource limits only (memory, CPU time, processes, "
                f"files, output). Your code could see the grading machine's files.")


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

    def __init__(self, slot: "Slot", folders: list[str], cwd: str, env: dict, startup_timeout: float):
        self.slot = slot
        self._attach(slot.spawn(folders, cwd, env), startup_timeout, slot.sandbox.limits.output)


class Slot:
    """One parallel grading lane: a fork server (sandboxed when possible) and its private folders."""

    def __init__(self, index: int, root: Path, sandbox: Sandbox, startup_timeout: float = 90.0):
        self.index, self.sandbox, self.startup_timeout = index, sandbox, startup_timeout
        self.root = Path(root) / f"slot{index}"
        self.sub, self.tmp = self.root / "submission", self.root / "tmp"
        for d in (self.root, self.sub, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.drop_uid, self._uid_lock = _claim_uid(index) if os.geteuid() == 0 else (None, None)
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._status: dict[int, int | None] = {}
        self._pids: dict[int, int] = {}
        self._next = 0
        self._ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conf = json.dumps({"drop_uid": self.drop_uid})
        prefix = bwrap_prefix(self.sub, self.tmp) if sandbox.mode == "bwrap" else []
        # Started now, waited for at the first spawn: the judge imports torch meanwhile.
        self.server = subprocess.Popen(
            [*prefix, sys.executable, "-I", "-B", "-c", SERVER_SOURCE, str(theirs.fileno()), conf],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=client.clean_env(), start_new_session=True,
            cwd=str(self.tmp))
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
                if msg["op"] == "spawned":
                    self._pids[msg["id"]] = msg["pid"]
                elif msg["op"] == "exited":
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
        """Make the slot hold exactly this submission and an empty private /tmp."""
        _wipe(self.sub, self.root)
        _wipe(self.tmp, self.root, keep=mounts_under_tmp(self.tmp) if self.sandbox.mode == "bwrap" else set())
        for f in sorted(Path(folder).iterdir()):
            if f.is_file():
                shutil.copyfile(f, self.sub / f.name)
                os.chmod(self.sub / f.name, 0o644)
        os.chmod(self.sub, 0o755)
        os.chmod(self.tmp, 0o1777)

    def spawn(self, folders: list[str], cwd: str, env: dict) -> _RemoteProc:
        self._wait_ready()
        with self._cond:
            wid = self._next
            self._next += 1
            self._status[wid] = None
        pipes = [os.pipe() for _ in range(3)]            # (read, write) each
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        limits = self.sandbox.limits.rlimits(self.drop_uid is not None,
                                             self.sandbox.mode == "bwrap" and os.geteuid() != 0)
        msg = {"op": "spawn", "id": wid, "source": client.WORKER_SOURCE, "folders": folders, "cwd": cwd,
               "env": env, "limits": limits}
        try:
            socket.send_fds(self._ctrl, [json.dumps(msg).encode()], theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        return _RemoteProc(self, wid, os.fdopen(pipes[0][1], "wb"), os.fdopen(pipes[1][0], "rb", buffering=0),
                           os.fdopen(pipes[2][0], "rb"))

    def worker_factory(self):
        """A grade() worker_factory: copy the prepared folder into the slot, fork a worker there."""
        def factory(folders: list[Path]) -> Worker:
            self.reset(folders[0])
            env = client.clean_env()
            if self.sandbox.mode == "bwrap":
                inner, cwd = ["/submission"], "/tmp"
            else:
                inner, cwd = [str(self.sub)], str(self.tmp)
            env.update(HOME=cwd, TMPDIR=cwd)
            return ForkedWorker(self, inner, cwd, env, self.startup_timeout)
        return factory

    def alive(self) -> bool:
        return self.server.poll() is None

    def close(self):
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
        if self._uid_lock is not None:          # every process of that uid is gone: free it
            os.close(self._uid_lock)
            self._uid_lock = None


def _claim_uid(index: int) -> tuple[int, int]:
    """An unprivileged uid that no other grader on this machine holds (an flock held for the slot's life).
    The fork server ends a worker by killing every process of the slot's uid; without bubblewrap's pid
    namespace that reaches the whole machine, so two graders (two nbgrader runs, a class and a single
    grade) must never share one. Returns (uid, the lock's fd)."""
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


def _wipe(path: Path, inside: Path, keep: set[Path] = frozenset()):
    """Empty `path`, which must be a folder inside this batch's own temporary folder.

    `keep`: mount points of the sandbox (and the folders leading to them) that must stay.
    """
    path, inside = Path(path).resolve(), Path(inside).resolve()
    tmp = Path(tempfile.gettempdir()).resolve()
    if not (path.is_relative_to(inside) and inside.is_relative_to(tmp) and path != inside
            and len(path.parts) > len(tmp.parts) + 1 and ".batch-" in str(path)):
        raise RuntimeError(f"refusing to empty {path}: not a batch grading folder under {tmp}")
    for child in path.iterdir():
        if child in keep:
            continue
        if any(k.is_relative_to(child) for k in keep):
            _wipe(child, inside, keep)
            continue
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
