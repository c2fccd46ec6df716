"""Confined commands for the long-lived sandboxes that are not grading slots: the notebook kernel, the
trainer of `course train` / `course translate`.

`command(...)` gives an argv that starts `python -I -B -c <confine.py + LAUNCHER>`: it confines itself
(resource limits; the unprivileged `uid` when it is root outside a user namespace; a syscall filter
`profile` from confine.PROFILES) and then runs the target in the same process (`runpy`), because the
filter forbids starting programs. Under bubblewrap (when it works) the process also lives in a user
namespace with no capability and sees only `binds`. Without bubblewrap and not as root, nothing keeps
the code from the grader's files: `isolation()` says so, and callers decide whether to go on.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from autograder.sandbox import bwrap
from autograder.sandbox.slot import CONFINE_SOURCE, Sandbox

LAUNCHER = CONFINE_SOURCE + '''
import json, runpy, sys
conf = json.loads(sys.argv[1])
if conf.get("reach") and conf.get("uid") is not None:
    reach_unreadable(conf["uid"], sys.modules)
for path in conf.get("own", []):
    if conf.get("uid") is not None:
        os.chown(path, conf["uid"], conf["uid"])
os.environ.clear()
os.environ.update(conf["env"])
os.chdir(conf["cwd"])
files = conf.get("files")
confine(conf["limits"], conf.get("uid"), conf["profile"],
        python_readable() + ["/proc/self"] + files["read"] if files else None, files["write"] if files else ())
exec(conf.get("preamble") or "")
sys.argv = conf["argv"]
sys.path[:0] = conf.get("path", [])
if conf["module"]:
    runpy.run_module(conf["module"], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(conf["script"], run_name="__main__")
'''


def isolation() -> Sandbox:
    """How these sandboxes are isolated on this machine (the same test as grading's)."""
    return Sandbox.detect("auto")


def command(target: list[str], *, profile: str, limits: dict, env: dict, cwd: Path,
            binds: list[tuple[str, Path, Path]], uid: int | None = None, own: list[Path] = (),
            path: list[str] = (), tmp_bytes: int = 256 * 1024 ** 2, box: Sandbox | None = None,
            preamble: str = "", landlock: bool = False) -> list[str]:
    """argv running `target` confined. `target`: ["-m", "module", args...] or ["script.py", args...].
    `uid`: the unprivileged uid to become when running as root without bubblewrap; `own`: paths given to
    that uid first; `path`: folders put first on sys.path (as `python -m` puts the working folder);
    `preamble`: code run once confined, before the target. `landlock`: without bubblewrap, the `binds`
    are also the only files the process may touch (Landlock, where the kernel has it): "ro" ones read,
    "rw" ones read and written, besides the Python install."""
    box = box or isolation()
    module = target[1] if target[0] == "-m" else None
    argv = [target[1], *target[2:]] if module else list(target)
    conf = {"limits": limits, "profile": profile, "env": env, "cwd": str(cwd), "argv": argv,
            "module": module, "script": None if module else target[0], "path": [str(p) for p in path],
            "uid": None, "own": [], "reach": False, "preamble": preamble}
    prefix: list[str] = []
    if box.isolated:
        prefix = bwrap.command(binds, str(cwd), tmp_bytes=tmp_bytes)
        prefix += ["--clearenv"] + [a for k, v in env.items() for a in ("--setenv", k, v)]
    else:
        if os.geteuid() == 0:
            conf.update(uid=uid, own=[str(p) for p in own], reach=True)
        if landlock:
            conf["files"] = {"read": [str(src) for kind, src, _ in binds if kind == "ro"],
                             "write": [str(src) for kind, src, _ in binds if kind == "rw"]}
    return [*prefix, sys.executable, "-I", "-B", "-c", LAUNCHER, json.dumps(conf)]
