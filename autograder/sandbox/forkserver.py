"""The fork server: imports torch and installs the guard once, then forks one worker per request.

Never imported. Started as `python -I -B -c <confine.py + guard.py + worker.py + this file> <control fd>
<config json>` (under bubblewrap when it works, as an unprivileged user with no capability), so it imports
nothing from the grader package. The judge talks to it over a SOCK_SEQPACKET socket:

  judge -> server  {"op": "spawn", "id", "key", "folders", "cwd", "env", "limits"} + 3 fds (the child's
                   stdin, stdout, stderr), or {"op": "kill", "id"}
  server -> judge  {"op": "ready"}, {"op": "spawned", "id", "pid"}, {"op": "exited", "id", "status"}

A spawned child starts its own session, applies resource limits, becomes the slot's unprivileged uid
when the server is root outside a user namespace (confine.drop_to), installs the worker's syscall
filter, starts its guard with the key the judge sent, arms it and serves requests (worker.py). The
server is a child subreaper, so it reaps every descendant and reports how each worker ended.
"""
import array
import json
import os
import select
import signal
import socket
import sys
import types

CTRL = socket.socket(fileno=int(sys.argv[1]))
CONF = json.loads(sys.argv[2])
DROP_UID = CONF.get("drop_uid")          # None, or an unused uid (never 0)

# Modules student code commonly imports: load them now, while the Python install is readable.
import math, random, time, itertools, functools, collections, heapq, bisect, dataclasses, operator  # noqa
import importlib, traceback, struct, copy, warnings, inspect, contextlib, typing, enum, string, re  # noqa
import numpy  # noqa
import torch  # noqa
import torch.nn.functional as F  # noqa
import torch.utils.flop_counter  # noqa
# torch imports this lazily (with sympy and ctypes: at a meta tensor, a first gradient under a mode): import it
# now, before ctypes is taken out of the worker, once per slot.
import torch.fx.experimental.symbolic_shapes  # noqa
import torch._compile  # noqa

torch.set_num_threads(1)


def _no_dynamo():
    """torch wraps many functions (meta kernels, dispatch modes) so that its compiler skips them, importing the
    compiler (dynamo: 0.5 s, and ctypes) at the first call to switch it off. Nothing here ever compiles (a worker's
    guard refuses torch.compile), so each wrapper may call its function directly, as it does once dynamo is
    loaded and idle. Optimizers import dynamo themselves: a spawn that needs it asks for it (see preload)."""
    import gc
    inner = torch._compile._disable_dynamo(lambda: None).__code__

    def _disable_dynamo(fn=None, recursive=True):
        return fn if fn is not None else _disable_dynamo
    torch._compile._disable_dynamo = torch._disable_dynamo = _disable_dynamo
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and obj.__code__ is inner:
            fn = obj.__closure__[inner.co_freevars.index("fn")].cell_contents
            try:
                setattr(fn, "__dynamo_disable", fn)
            except AttributeError:
                pass


_no_dynamo()
PRELOADABLE = ("torch._dynamo",)     # what a spawn may ask the server to import first (see preload)


class NotPreloaded:
    """In a worker whose server did not load dynamo: importing it (an optimizer's step does) is a clear error
    instead of a lazy import of ctypes, which the guard would take for tampering."""

    def find_spec(self, name, path=None, target=None):
        if name in PRELOADABLE:
            raise ImportError(f"{name} (torch's compiler, which optimizers and torch.func load) is not available "
                              f"while this milestone is graded: the functions graded here need neither")
        return None


def _prewarm():
    """Pay torch's first-call costs once, before forking, and load now what torch imports lazily on those
    first calls (an optimizer step's record_function imports a profiler module that imports ctypes)."""
    for dtype in (torch.float64, torch.float32):
        q = torch.randn(2, 2, 3, 4, dtype=dtype, requires_grad=True)
        mask = torch.ones(3, 3, dtype=torch.bool).tril()
        s = (q @ q.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))
        out = torch.softmax(s, -1) @ q
        out.backward(torch.ones_like(out))
        lin = torch.nn.Linear(4, 4, dtype=dtype)
        opt = torch.optim.Adam(lin.parameters())
        F.gelu(F.dropout(lin(q), 0.5)).sum().backward()
        torch.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
        torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        with torch.autograd.profiler.record_function("step"):   # what an optimizer step opens first
            pass
        torch.multinomial(torch.ones(2, 3), 1)


_prewarm()
# Found once here (a worker may not create files, so it would find none): a write there is then refused plainly.
__import__("tempfile").gettempdir()
if DROP_UID is not None:          # a root-only Python install, read through folders opened now
    reach_unreadable(DROP_UID, sys.modules)  # noqa: F821 (confine.py)
try:   # PR_SET_CHILD_SUBREAPER: orphans of a worker are reaped here
    import ctypes
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


def _scrub_ctypes():
    """No ctypes in a worker: it can write the interpreter's memory. Importing it again is tamper evidence."""
    gone = [m for n, m in list(sys.modules.items()) if n in ("ctypes", "_ctypes") or n.startswith("ctypes.")]
    for n in [n for n in sys.modules if n in ("ctypes", "_ctypes") or n.startswith("ctypes.")]:
        del sys.modules[n]
    own = sys.modules["__main__"]     # this server's own namespace (also under other names, __mp_main__):
    for mod in list(sys.modules.values()):  # workers replace it with an empty module
        if mod is own:
            continue
        d = vars(mod) if isinstance(mod, types.ModuleType) else None
        for k, v in list((d or {}).items()):
            owner = vars(v).get("__module__") if isinstance(v, type) else None
            if any(v is g for g in gone) or (isinstance(owner, str) and owner.startswith(("ctypes", "_ctypes"))):
                del d[k]


def preload(modules, ledger):
    """Import what a spawn asked for (dynamo, for optimizers) once, in the server: then the guard's tripwires
    in the new modules, and ctypes scrubbed again."""
    missing = [m for m in modules if m not in sys.modules]
    if not missing:
        return
    for name in missing:
        __import__(name)
    lin = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()               # imports what a first step imports (a profiler module, with ctypes)
    extend(ledger, sys.modules)  # noqa: F821 (guard.py)
    _scrub_ctypes()


def child(msg, fds, ledger):
    code = 70
    try:
        key = bytes.fromhex(msg.pop("key"))
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        CTRL.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        reply_fd = os.dup(1)                        # the protocol channel; fd 1 becomes the student's stderr
        os.dup2(2, 1)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        os.chdir(msg["cwd"])
        os.environ.clear()
        os.environ.update(msg.get("env") or {})
        sys.argv = ["-c"]
        sys.path[:0] = msg["folders"]
        if any(m not in sys.modules for m in PRELOADABLE):
            sys.meta_path.insert(0, NotPreloaded())
        confine(msg.get("limits") or {}, DROP_UID, "worker",  # noqa: F821 (confine.py)
                python_readable() + list(msg["folders"]))  # noqa: F821
        serve, functions = worker_main(ledger, {"reply_fd": reply_fd, "folders": msg["folders"]},  # noqa: F821
                                       os, sys, __import__("marshal"))
        start(ledger, key, reply_fd, functions + [child])  # noqa: F821 (guard.py)
        del key, ledger
        own, blank = sys.modules["__main__"], types.ModuleType("__main__")
        for name in [n for n, m in sys.modules.items() if m is own]:      # __main__, __mp_main__, ...
            sys.modules[name] = blank
        sys.audit("course.arm", [os.path.join(f, "") for f in msg["folders"]])
        code = 0
        serve()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        try:
            import traceback as tb
            tb.print_exc()
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
    # Processes that left the session still run as the slot's uid: a helper with that uid kills
    # everything it may signal, i.e. exactly this slot's processes. Never as root.
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
    ledger = install(sys.modules)  # noqa: F821 (guard.py): held here only, never in a global
    _scrub_ctypes()     # once for every worker (confine.py keeps its own reference, for the filter)
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
            preload([m for m in msg.pop("preload", ()) if m in PRELOADABLE], ledger)
            pid = os.fork()
            if pid == 0:
                child(msg, fds, ledger)
            msg.pop("key", None)
            for fd in fds:
                os.close(fd)
            workers[pid] = msg["id"]
            send({"op": "spawned", "id": msg["id"], "pid": pid})
        elif msg["op"] == "kill":
            for pid, wid in list(workers.items()):
                if wid == msg["id"]:
                    kill_worker(pid)


main()
