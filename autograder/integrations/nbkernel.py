"""The kernel that runs a student's notebook at autograde: it cannot see the course, and has no network.

`SandboxedKernelManager` is a jupyter_client kernel manager for nbgrader's execute step. Its kernel
talks over ipc (unix sockets in a private folder), so it can live in a network namespace of its own.
The kernel is started by sandbox.launch (confine.py: resource limits, no capability, the "kernel"
syscall filter: no new processes or programs, no sockets but unix ones, no ptrace), and:
- with bubblewrap: in a user namespace as uid 65534, seeing the Python install and /usr read-only, the
  student's autograded folder read-only, its socket folder, and a size-limited /tmp; nothing of the
  course directory (no solutions/, no gradebook.db, no other students), no network;
- without it: as an unprivileged uid when nbgrader runs as root, so course files cannot be written; the
  verdict cells then say the notebook was not isolated.
The socket folder is the only place on the host it may write: the manager stops the kernel when that
folder grows past KERNEL_DISK. Interrupts go as messages (a signal cannot reach into the sandbox).

No score depends on this kernel: autograded cells get their verdicts from the engine (nbgrade.py).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from autograder.sandbox import launch, slot

KERNEL_UID = slot.BASE_UID - 1         # below every grading slot's uid (a slot's kill would reach us)
KERNEL_LIMITS = {"memory": 6 * 1024 ** 3, "nofile": 1024, "fsize": 256 * 1024 ** 2, "core": 0}
KERNEL_DISK = 512 * 1024 ** 2          # bytes the kernel may write into its socket folder
KERNEL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/mpl",
              "IPYTHONDIR": "/tmp/ipython", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
              "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}


NO_SUBPROCESS_PIPE = ("import ipykernel.iostream\n"
                      "ipykernel.iostream.IOPubThread._setup_pipe_in = lambda self: setattr(self, '_pipe_flag', False)\n")


def isolation():
    """How notebook kernels are isolated on this machine (the same test as grading's)."""
    return launch.isolation()


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
        cwd = Path(self._launch_args.get("cwd") or os.getcwd()).resolve()
        env = dict(KERNEL_ENV)
        box = isolation()
        if not box.isolated:        # no private /tmp: home, caches and history live in the socket folder
            home = self._private / "home"
            home.mkdir(exist_ok=True)
            env.update(HOME=str(home), MPLCONFIGDIR=str(home / "mpl"), IPYTHONDIR=str(home / "ipython"))
        # [python, interpreter options (-Xfrozen_modules=off), -m, ipykernel_launcher, -f, connection file]:
        # the launcher runs the module in its own interpreter, so only what follows -m is kept.
        target = cmd[cmd.index("-m"):] if "-m" in cmd else ["-m", "ipykernel_launcher", *cmd[1:]]
        self._watch_disk()
        # Without a network namespace the kernel may open unix sockets only: its pipe for forked
        # subprocesses (which the filter forbids anyway) would bind 127.0.0.1, so it is left out.
        return launch.command(target, profile="kernel_netns" if box.isolated else "kernel", limits=KERNEL_LIMITS,
                              env=env, cwd=cwd, binds=[("ro", cwd, cwd), ("rw", self._private, self._private)],
                              uid=KERNEL_UID, own=[self._private, Path(self.connection_file),
                                                   *self._private.glob("home")],
                              path=[str(cwd)], box=box, preamble=NO_SUBPROCESS_PIPE if not box.isolated else "")

    def _watch_disk(self):
        """Stop the kernel when its socket folder holds more than KERNEL_DISK bytes."""
        def watch(folder=self._private):
            while folder.is_dir():
                used = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
                if used > KERNEL_DISK and self.has_kernel:
                    self.provisioner and self.provisioner.process and self.provisioner.process.kill()
                    return
                threading.Event().wait(1.0)
        threading.Thread(target=watch, daemon=True).start()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(self._private, ignore_errors=True)
