"""The kernel that runs a student's notebook at autograde: it cannot see the course, and has no network.

`SandboxedKernelManager` is a jupyter_client kernel manager for nbgrader's execute step. Its kernel
talks over ipc (unix sockets in a private folder), so it can live in a network namespace of its own:
- with bubblewrap (sandbox.bwrap_args): the kernel sees the Python install and /usr read-only, the
  student's autograded folder and its socket folder, and an empty /tmp; nothing of the course
  directory (no solutions/, no gradebook.db, no other students), no network;
- without it: resource limits, and when nbgrader runs as root an unprivileged uid (confine.py), so
  course files cannot be written; the verdict cells then say the notebook was not isolated.
Interrupts go as messages (a signal cannot reach into the sandbox's process tree reliably).

No score depends on this kernel: autograded cells get their verdicts from the engine (nbgrade.py).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from .engine import sandbox

KERNEL_UID = sandbox.BASE_UID - 1         # below every grading slot's uid (a slot's kill would reach us)
KERNEL_LIMITS = {"memory": 6 * 1024 ** 3, "nproc": 128, "nofile": 1024, "fsize": 256 * 1024 ** 2, "core": 0}
KERNEL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/mpl",
              "IPYTHONDIR": "/tmp/ipython", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
              "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}

LAUNCHER = sandbox.CONFINE_SOURCE + '''
import json, os, sys
conf = json.loads(sys.argv[1])
set_limits(conf["limits"])
if conf.get("uid") is not None:
    for path in conf["own"]:
        os.chown(path, conf["uid"], conf["uid"])
    drop_privileges(conf["uid"], not readable_as(conf["uid"], conf["read"]))
os.environ.clear()
os.environ.update(conf["env"])
os.chdir(conf["cwd"])
os.execv(sys.argv[2], sys.argv[2:])
'''


def isolation() -> sandbox.Sandbox:
    """How notebook kernels are isolated on this machine (the same test as grading's)."""
    return sandbox.Sandbox.detect("auto")


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run confined (see the module docstring)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.transport = "ipc"
        self._private = Path(tempfile.mkdtemp(prefix="course-kernel-"))
        os.chmod(self._private, 0o700)
        self.connection_file = str(self._private / "kernel.json")
        self.ip = str(self._private / "k")        # ipc socket paths: <ip>-<port>

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"
        return spec

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        cwd = str(Path(self._launch_args.get("cwd") or os.getcwd()).resolve())
        env = dict(KERNEL_ENV)
        box = isolation()
        if box.isolated:
            prefix = sandbox.bwrap_args(None, [("rw", Path(cwd), Path(cwd)), ("rw", self._private, self._private)],
                                        cwd, uid_drop=False)
            prefix += ["--clearenv"] + [a for k, v in env.items() for a in ("--setenv", k, v)]
            return prefix + cmd
        home = self._private / "home"
        home.mkdir(exist_ok=True)
        env.update(HOME=str(home), MPLCONFIGDIR=str(home / "mpl"), IPYTHONDIR=str(home / "ipython"))
        root = os.geteuid() == 0
        conf = {"limits": KERNEL_LIMITS, "env": env, "cwd": cwd, "uid": KERNEL_UID if root else None,
                "own": [str(self._private), self.connection_file, str(home)],
                "read": [p for p in sys.path if p]}
        exe = shutil.which(cmd[0]) or cmd[0]
        return [sys.executable, "-I", "-B", "-c", LAUNCHER, json.dumps(conf), exe, *cmd[1:]]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(self._private, ignore_errors=True)
