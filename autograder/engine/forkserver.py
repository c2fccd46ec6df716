"""The fork server: imports torch once, then forks one worker per request. Never imported.

Started as `python -I -B -c <confine.py + this file's source> <control fd> <config json>` (under
bubblewrap when it works), so, like worker.py, it imports nothing from the grader package; the
functions of confine.py (set_limits, drop_privileges, readable_as) are defined before this text.
The judge talks to it over a SOCK_SEQPACKET socket:

  judge -> server  {"op": "spawn", "id", "source", "folders", "cwd", "env", "limits"} + 3 fds
                   (the child's stdin, stdout, stderr), or {"op": "kill", "id"}
  server -> judge  {"op": "ready"}, {"op": "spawned", "id", "pid"}, {"op": "exited", "id", "status"}

A spawned child starts its own session, applies resource limits, drops to an unprivileged uid when
the server runs as root (confine.drop_privileges), and runs the worker source (the same text
`python -c` would run). The server is a child subreaper, so it reaps every descendant and reports
how each worker ended.
"""
import array
import io
import json
import os
import select
import signal
import socket
import sys

CTRL = socket.socket(fileno=int(sys.argv[1]))
CONF = json.loads(sys.argv[2])
DROP_UID = CONF.get("drop_uid")          # None, or an unused uid (never 0)
# Decided once, before torch is imported: can the dropped uid read every folder of the Python install?
KEEP_READ = DROP_UID is not None and not readable_as(DROP_UID, [p for p in sys.path if p])  # noqa: F821

# Modules student code commonly imports: load them now, while the Python install is readable.
import math, random, time, itertools, functools, collections, subprocess, threading, tempfile, shutil  # noqa
import importlib, traceback, struct, copy, warnings, inspect, ctypes, contextlib, typing  # noqa
import numpy  # noqa
import torch  # noqa
import torch.nn.functional as F  # noqa
from torch.overrides import TorchFunctionMode  # noqa
from torch.utils._python_dispatch import TorchDispatchMode  # noqa

torch.set_num_threads(1)


def _prewarm():
    """Pay torch's first-call costs (autograd, dispatch modes, save/load) once, before forking."""
    class _M(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class _T(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    for dtype in (torch.float64, torch.float32):
        q = torch.randn(2, 2, 3, 4, dtype=dtype, requires_grad=True)
        mask = torch.ones(3, 3, dtype=torch.bool).tril()
        with _T(), _M():
            s = (q @ q.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))
            m = s.amax(-1, keepdim=True)
            e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
            out = (e / e.sum(-1, keepdim=True)) @ q
        out.backward(torch.ones_like(out))
        F.scaled_dot_product_attention(q.detach(), q.detach(), q.detach(), attn_mask=mask)
        torch.softmax(q.detach(), -1)
        lin = torch.nn.Linear(4, 4, dtype=dtype)
        F.gelu(F.dropout(lin(q), 0.5)).sum().backward()
        buf = io.BytesIO()
        torch.save({"x": q.detach(), "l": [1, "a", None]}, buf)
        torch.load(io.BytesIO(buf.getvalue()), weights_only=True)


_prewarm()
try:   # PR_SET_CHILD_SUBREAPER: orphans of a worker (fork bombs) are reaped here
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
except Exception:
    pass


def send(msg):
    try:
        CTRL.send(json.dumps(msg).encode())
    except OSError:
        pass


def receive():
    fds = array.array("i")
    try:
        data, anc, _flags, _addr = CTRL.recvmsg(1 << 20, socket.CMSG_SPACE(16 * fds.itemsize))
    except OSError:
        return None, []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return (json.loads(data) if data else None), list(fds)


def child(msg, fds):
    code = 70
    try:
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        CTRL.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        set_limits(msg.get("limits") or {})  # noqa: F821 (confine.py)
        if DROP_UID is not None:
            drop_privileges(DROP_UID, KEEP_READ)  # noqa: F821 (confine.py)
        os.chdir(msg["cwd"])
        os.environ.clear()
        os.environ.update(msg.get("env") or {})
        tempfile.tempdir = None
        sys.argv = ["-c", *msg["folders"]]
        code = 0
        exec(compile(msg["source"], "<worker>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 70
    finally:
        try:
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


def kill_worker(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if DROP_UID is None:
        return
    # Processes that left the session (setsid) still run as the slot's uid: a helper with that uid
    # kills everything it may signal, i.e. exactly this slot's processes. Never as root.
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(DROP_UID)
            os.setuid(DROP_UID)
            if os.getuid() != 0 and os.geteuid() != 0:
                os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)


def main():
    workers = {}     # pid -> request id
    send({"op": "ready", "pid": os.getpid(), "uid": os.getuid()})
    while True:
        readable = select.select([CTRL], [], [], 0.1)[0]
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in workers:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                send({"op": "exited", "id": workers.pop(pid), "status": code})
        if not readable:
            continue
        msg, fds = receive()
        if msg is None:        # the judge went away: stop every worker and leave
            for pid in list(workers):
                kill_worker(pid)
            os._exit(0)
        if msg["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                child(msg, fds)
            for fd in fds:
                os.close(fd)
            workers[pid] = msg["id"]
            send({"op": "spawned", "id": msg["id"], "pid": pid})
        elif msg["op"] == "kill":
            for pid, wid in list(workers.items()):
                if wid == msg["id"]:
                    kill_worker(pid)


main()
