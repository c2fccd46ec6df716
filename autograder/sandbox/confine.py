"""Confine a process that is about to run student code: resource limits, no privilege, a syscall filter.

Standalone on purpose (standard library only, never imported by the grader): the fork server, the
notebook kernel and the trainer are started as `python -I -c <source>`, whose source is this file's text
followed by their own (see bwrap.py / slot.py).

Three layers, applied in this order by `confine(...)`:
- resource limits (address space, CPU time, open files, file size, no core files);
- privilege: when the process is root outside a user namespace, it becomes an unprivileged uid with no
  supplementary groups and, like every process here, no capability at all (it exits rather than keep
  one); under bubblewrap it already runs in a user namespace with every capability dropped;
- a seccomp filter (kernel-enforced, irrevocable, inherited): no new processes, no program execution,
  no sockets to the outside, no ptrace or cross-process memory access, no mounts or namespaces, no
  kernel keyrings, BPF or io_uring, signals only to itself; for grading workers also no timers or
  signal handlers and no file opened for writing (so a worker's disk use is zero and no student code
  runs outside the grader's observation window).

`reach_unreadable(uid)` lets an unprivileged uid import from a Python install it cannot traverse (a
pyenv under a root-only home): the folders are opened while still root and used through
/proc/self/fd, so no capability is kept.
"""
import ctypes
import os
import platform
import resource
import struct

_RLIMITS = {"cpu": resource.RLIMIT_CPU, "nproc": resource.RLIMIT_NPROC, "nofile": resource.RLIMIT_NOFILE,
            "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
EXIT_NOT_CONFINED = 71      # the process refused to run student code with a privilege left


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
        value = _address_space() + int(limits["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (value, value))


def _address_space():
    with open("/proc/self/status") as f:
        return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)


def capabilities():
    """The effective capability mask of this process (0 when it has none), or None if unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        return None
    return None


def drop_to(uid):
    """Become `uid` (never 0): no supplementary groups, no capability, no way to regain one."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0 or capabilities():
        os._exit(EXIT_NOT_CONFINED)


def unreadable_as(uid, paths):
    """The folders of `paths` that `uid` cannot list, found in one short-lived child (nothing here changes)."""
    folders = [p for p in paths if os.path.isdir(p)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            drop_to(uid)
            blocked = []
            for p in folders:
                try:
                    os.listdir(p)
                except OSError:
                    blocked.append(p)
            os.write(w, "\0".join(blocked).encode("utf-8", "surrogateescape"))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return [p for p in data.decode("utf-8", "surrogateescape").split("\0") if p]


def _search_paths(modules):
    """sys.path and every loaded package's __path__ (lists of folder names)."""
    import sys
    import types
    lists = [sys.path]
    for m in list(modules.values()):
        if isinstance(m, types.ModuleType):
            path = vars(m).get("__path__")
            if type(path) is list:
                lists.append(path)
    return lists


def reach_unreadable(uid, modules):
    """Where `uid` cannot list a folder of sys.path or of a loaded package's __path__, open it now (as
    root) and use it as /proc/self/fd/N instead: the kernel then never walks the root-only folders above
    it. Returns the folders rerouted."""
    import sys
    lists = _search_paths(modules)
    folders = sorted({p for path in lists for p in path if type(p) is str and p})
    moved = {}
    for p in unreadable_as(uid, folders):
        fd = os.open(p, os.O_PATH | os.O_DIRECTORY)
        os.set_inheritable(fd, True)            # workers are forked, not exec'd: the fd stays open
        moved[p] = f"/proc/self/fd/{fd}"
    for path in lists:
        path[:] = [moved.get(p, p) for p in path]
    sys.path_importer_cache.clear()
    return sorted(moved)


# ---- the syscall filter ---------------------------------------------------------------------------

# (x86_64, aarch64) numbers; None where the call does not exist on that architecture.
_CALLS = {
    "fork": (57, None), "vfork": (58, None), "clone": (56, 220), "clone3": (435, 435),
    "execve": (59, 221), "execveat": (322, 281),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438), "pidfd_send_signal": (424, 424),
    "process_madvise": (440, 440),
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    "socket": (41, 198), "socketpair": (53, 199),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "reboot": (169, 142), "swapon": (167, 224), "swapoff": (168, 225),
    "acct": (163, 89), "iopl": (172, None), "ioperm": (173, None), "syslog": (103, 116),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "memfd_create": (319, 279), "memfd_secret": (447, 447),
    # grading workers only: timers, signal handlers, anything that creates or changes a file
    "rt_sigaction": (13, 134), "alarm": (37, None), "setitimer": (38, 103), "timer_create": (222, 107),
    "open": (2, None), "openat": (257, 56), "openat2": (437, 437), "creat": (85, None),
    "mkdir": (83, None), "mkdirat": (258, 34), "mknod": (133, None), "mknodat": (259, 33),
    "link": (86, None), "linkat": (265, 37), "symlink": (88, None), "symlinkat": (266, 36),
    "unlink": (87, None), "unlinkat": (263, 35), "rmdir": (84, None),
    "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276),
    "truncate": (76, 45), "fallocate": (285, 47), "chmod": (90, None), "fchmodat": (268, 53),
    "chown": (92, None), "lchown": (94, None), "fchownat": (260, 54),
}
EPERM, EAGAIN, EACCES, ENOSYS = 1, 11, 13, 38
AF_UNIX, CLONE_THREAD = 1, 0x10000
WRITE_FLAGS = 0x1 | 0x2 | 0x40 | 0x200 | 0x400 | 0x400000     # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND __O_TMPFILE

_ALWAYS = ("fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
           "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "mount", "umount2", "pivot_root",
           "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
           "name_to_handle_at", "open_by_handle_at", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
           "request_key", "init_module", "finit_module", "delete_module", "kexec_load", "reboot", "swapon",
           "swapoff", "acct", "iopl", "ioperm", "syslog", "io_uring_setup", "io_uring_enter",
           "io_uring_register", "memfd_create", "memfd_secret")
# profile -> calls denied outright, whether threads may start, which sockets, whether files may be written
PROFILES = {
    "worker": {"deny": _ALWAYS + ("clone", "socket", "socketpair", "rt_sigaction", "alarm", "setitimer",
                                  "timer_create", "openat2", "creat", "mkdir", "mkdirat", "mknod", "mknodat",
                                  "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "rmdir",
                                  "rename", "renameat", "renameat2", "truncate", "fallocate", "chmod",
                                  "fchmodat", "chown", "lchown", "fchownat"),
               "threads": False, "unix_sockets": False, "write_files": False},
    "trainer": {"deny": _ALWAYS + ("socket", "socketpair"), "threads": True, "unix_sockets": False,
                "write_files": True},
    "kernel": {"deny": _ALWAYS, "threads": True, "unix_sockets": True, "write_files": True},
    # under bubblewrap's network namespace (loopback only): jupyter's kernel binds 127.0.0.1 for its pipes
    "kernel_netns": {"deny": _ALWAYS, "threads": True, "unix_sockets": False, "write_files": True},
}


def _bpf_stmt(code, k):
    return struct.pack("HBBI", code, 0, 0, k & 0xFFFFFFFF)


def _bpf_jump(code, k, jt, jf):
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000


def _errno(e):
    return 0x00050000 | e


def _arg(i, high=False):
    return 16 + 8 * i + (4 if high else 0)


def syscall_filter(profile, pid):
    """The BPF program of `profile` for this architecture; `pid`: the only process signals may reach."""
    arch = platform.machine()
    column = {"x86_64": 0, "aarch64": 1}.get(arch)
    if column is None:
        raise OSError(f"no syscall filter for {arch}")
    audit_arch = (0xC000003E, 0xC00000B7)[column]
    spec = PROFILES[profile]
    nr = lambda name: _CALLS[name][column]          # noqa: E731
    code = [_bpf_stmt(_LD_W_ABS, 4), _bpf_jump(_JEQ_K, audit_arch, 1, 0), _bpf_stmt(_RET_K, _KILL),
            _bpf_stmt(_LD_W_ABS, 0)]
    if column == 0:                                 # the x32 ABI: other numbers for the same calls
        code += [_bpf_jump(0x35, 0x40000000, 0, 1), _bpf_stmt(_RET_K, _errno(ENOSYS))]     # JGE
    blocks = []           # (syscall number, instructions run with the number loaded; must end in RET)

    def deny(name, err):
        if nr(name) is not None:
            blocks.append((nr(name), [_bpf_stmt(_RET_K, _errno(err))]))

    for name in spec["deny"]:
        if name == "clone" and spec["threads"]:
            continue
        deny(name, {"clone": EAGAIN, "fork": EAGAIN, "vfork": EAGAIN, "clone3": ENOSYS,
                    "socket": EACCES, "socketpair": EACCES}.get(name, EPERM if "open" not in name else EACCES))
    deny("clone3", ENOSYS)       # its flags are out of the filter's reach: glibc then falls back to clone
    if spec["threads"]:          # clone for a thread only
        blocks.append((nr("clone"), [_bpf_stmt(_LD_W_ABS, _arg(0)), _bpf_jump(_JSET_K, CLONE_THREAD, 0, 1),
                                     _bpf_stmt(_RET_K, _ALLOW), _bpf_stmt(_RET_K, _errno(EAGAIN))]))
    if spec["unix_sockets"]:
        blocks.append((nr("socket"), [_bpf_stmt(_LD_W_ABS, _arg(0)), _bpf_jump(_JEQ_K, AF_UNIX, 0, 1),
                                      _bpf_stmt(_RET_K, _ALLOW), _bpf_stmt(_RET_K, _errno(EACCES))]))
    if not spec["write_files"]:
        for name, i in (("open", 1), ("openat", 2)):
            if nr(name) is not None:
                blocks.append((nr(name), [_bpf_stmt(_LD_W_ABS, _arg(i)), _bpf_jump(_JSET_K, WRITE_FLAGS, 0, 1),
                                          _bpf_stmt(_RET_K, _errno(EACCES)), _bpf_stmt(_RET_K, _ALLOW)]))
    # Signals reach this process only: kill(pid), tgkill(pid, ...), rt_(tg)sigqueueinfo(pid, ...).
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        if nr(name) is not None:
            blocks.append((nr(name), [_bpf_stmt(_LD_W_ABS, _arg(0, high=True)), _bpf_jump(_JEQ_K, 0, 0, 3),
                                      _bpf_stmt(_LD_W_ABS, _arg(0)), _bpf_jump(_JEQ_K, pid, 0, 1),
                                      _bpf_stmt(_RET_K, _ALLOW), _bpf_stmt(_RET_K, _errno(EPERM))]))
    deny("tkill", EPERM)          # only glibc's own (pthread) use it, for threads we do not have
    for number, body in blocks:
        code.append(_bpf_jump(_JEQ_K, number, 0, len(body)))
        code += body
    code.append(_bpf_stmt(_RET_K, _ALLOW))
    return b"".join(code), len(code)


def filter_syscalls(profile):
    """Install the seccomp filter of `profile` (see PROFILES) on this process and its future children."""
    program, count = syscall_filter(profile, os.getpid())
    libc = ctypes.CDLL(None, use_errno=True)

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = _Prog(count, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        os._exit(EXIT_NOT_CONFINED)


# ---- Landlock: files beneath a few folders only -----------------------------------------------------

_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446      # the same on x86_64 and aarch64
_READ_RIGHTS = (1 << 0) | (1 << 2) | (1 << 3)                                 # execute, read file, read dir
_ALL_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}         # per Landlock ABI (4+: as 3, fs)


def landlock_abi():
    """The kernel's Landlock ABI version, or 0 where Landlock is missing or switched off."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def restrict_files(readable, writable=()):
    """Let this process (and its children) read and execute files beneath the folders and files of
    `readable`, do anything beneath the folders of `writable`, and touch nothing else on any file system
    (Landlock). Returns False where the kernel has no Landlock; exits rather than go on half-restricted."""
    abi = landlock_abi()
    if abi == 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    handled = _ALL_RIGHTS[min(abi, 3)]
    attr = struct.pack("Q", handled)
    ruleset = libc.syscall(_LANDLOCK_CREATE, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        os._exit(EXIT_NOT_CONFINED)
    try:
        for path, full in [(p, False) for p in readable] + [(p, True) for p in writable]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue                          # not on this machine: nothing to allow
            try:
                rights = handled if full else _READ_RIGHTS if os.path.isdir(path) else (1 << 0) | (1 << 2)
                rule = struct.pack("=Qi", rights, fd)
                if libc.syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                                ctypes.c_uint32(0)) != 0:
                    os._exit(EXIT_NOT_CONFINED)
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.syscall(_LANDLOCK_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            os._exit(EXIT_NOT_CONFINED)
    finally:
        os.close(ruleset)
    return True


def python_readable():
    """What a Python process reads: its install (standard library, site-packages), system libraries."""
    import sys
    import sysconfig
    paths = {p for p in sys.path if p and os.path.isdir(p)}
    paths |= {v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc/ld.so.cache", "/etc/localtime", "/dev/null",
              "/dev/urandom", "/dev/zero"}
    return sorted(paths)


def confine(limits, uid=None, profile=None, readable=None, writable=()):
    """Limits, then (as root outside a user namespace) the unprivileged `uid`, then (where the kernel has
    Landlock) files beneath `readable` (read) and `writable` (anything) only, then the syscall filter."""
    set_limits(limits or {})
    if uid is not None:
        drop_to(uid)
    elif os.geteuid() == 0 and capabilities():
        os._exit(EXIT_NOT_CONFINED)      # root with capabilities and nowhere to go: never run student code
    if readable is not None:
        restrict_files(readable, writable)
    if profile is not None:
        filter_syscalls(profile)
