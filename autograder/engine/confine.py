"""Confine a process that is about to run student code: resource limits and an unprivileged uid.

Standalone on purpose (standard library only, never imported as part of the grader): the fork server
and the notebook kernel launcher run as `python -I -c <source>`, and their source is this file's text
followed by their own (see sandbox.py).

Dropping to an unprivileged uid when the grader runs as root keeps student code from writing the
course's files, lets RLIMIT_NPROC count only that uid, and lets the grader kill everything it left
behind. Where the Python install itself is unreadable to that uid (a pyenv under a root-only home),
every standard module not imported before the drop would fail to import; there the process keeps
one capability, CAP_DAC_READ_SEARCH (read any file), and nothing else: it still cannot write, signal
or own anything of root's.
"""
import ctypes
import os
import resource

PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522

_RLIMITS = {"cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE,
            "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE}


def set_limits(limits):
    """Apply {"cpu", "nproc", "nofile", "fsize", "core": value, "memory": bytes above the current size}."""
    root = os.geteuid() == 0
    for key, which in _RLIMITS.items():
        if limits.get(key) is None:
            continue
        value = int(limits[key])
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY and not root:
            value = min(value, hard)
        resource.setrlimit(which, (value, value if root or hard == resource.RLIM_INFINITY else hard))
    if limits.get("memory"):
        with open("/proc/self/status") as f:
            size = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)
        value = size + int(limits["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (value, value))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid, keep_read=False):
    """Become `uid` (never 0) with no supplementary groups; optionally keep CAP_DAC_READ_SEARCH only.

    Exits the process (status 71) rather than run student code with any other privilege.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if keep_read:
        libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        os._exit(71)
    if keep_read:
        data = (_CapData * 2)()
        data[0].effective = data[0].permitted = 1 << CAP_DAC_READ_SEARCH
        if libc.capset(ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), data) != 0:
            os._exit(71)
        libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def readable_as(uid, paths):
    """Can `uid` list every folder in `paths`? Tried in a short-lived child, so nothing here changes."""
    folders = [p for p in paths if os.path.isdir(p)]      # judged as root, before the drop
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for p in folders:
                os.listdir(p)
            code = 0
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
