"""bubblewrap command lines: a new user namespace with no capability, nothing of the host but what is bound.

Every sandbox of the course (grading slots, the notebook kernel, the trainer) is built here. Inside,
the process is uid 65534 with every capability dropped (also when the grader runs as root: then the
namespace maps it to root's files without any of root's powers), in new pid, network, ipc, uts and
cgroup namespaces, with only /usr and the libraries, the Python install (read-only), and the binds a
caller asks for. /tmp is a size-limited tmpfs unless a folder is bound there.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SANDBOX_UID = 65534


def namespace_args() -> list[str]:
    return ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL",
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session"]


def works() -> tuple[bool, str]:
    """Can bubblewrap build this sandbox here? (False, why) on macOS, without bwrap or user namespaces."""
    if sys.platform != "linux":
        return False, f"bubblewrap needs Linux (this is {sys.platform})"
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bubblewrap (bwrap) is not installed"
    cmd = [exe, *namespace_args(), "--ro-bind", "/", "/", "true"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap could not start ({e})"
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        return False, f"bwrap cannot create user namespaces here ({why[-1] if why else r.returncode})"
    return True, ""


def python_dirs() -> list[Path]:
    """The folders a Python process needs: the install, the virtualenv (also under its own name)."""
    dirs = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent}
    out: list[Path] = []
    for d in sorted(dirs, key=lambda p: len(p.parts)):
        if not any(d.is_relative_to(o) for o in out) and d != Path("/"):
            out.append(d)
    venv = Path(sys.prefix)
    if venv.resolve() != venv and venv not in out:
        out.append(venv)
    return out


def command(binds: list[tuple[str, Path, Path]], chdir: str, *, tmp: Path | None = None,
            tmp_bytes: int = 64 * 1024 ** 2, proc: bool = True) -> list[str]:
    """A bubblewrap prefix. `binds`: ("ro" | "rw", source, target). /tmp: `tmp` bound there, or an empty
    tmpfs of `tmp_bytes`. `proc=False` leaves /proc out (grading workers: no /proc/self/mem to open)."""
    args = ["bwrap", *namespace_args(), "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    # /tmp first: a Python environment or folder under /tmp (a CI checkout there) is bound over it below.
    args += ["--bind", str(tmp), "/tmp"] if tmp is not None else ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/usr"), Path("/tmp")}
    mounts = [("ro", d, d) for d in python_dirs() if not d.is_relative_to("/usr")] + list(binds)
    for mode, source, target in mounts:
        target = Path(target)
        for parent in reversed(target.parents):
            if parent not in made:
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind" if mode == "ro" else "--bind", str(source), str(target)]
        made.add(target)
    if proc:
        args += ["--proc", "/proc"]
    return args + ["--dev", "/dev", "--chdir", chdir]
