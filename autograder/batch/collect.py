"""Find every student's submission in the layouts instructors get them in.

Accepted under SUBMISSIONS:
- one folder per student: `<student>/attention.py` (the files may sit deeper, e.g.
  `<student>/m1_attention/attention.py`, as in a cloned student repository);
- nbgrader's `submitted/<student>/<assignment>/` (SUBMISSIONS may be the course folder holding
  `submitted/`, or `submitted/` itself); a notebook `<module>.ipynb` stands in for `<module>.py`;
- a folder of zip files as LMS exports give them: `<student>.zip` (Canvas-style names
  `<student>_<ids>_<file>.zip` use the part before the first `_<digits>`).
Zips are read without extracting anything but the milestone's files, with size limits.
"""
from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..config import Milestone

MAX_DEPTH = 4
MAX_MEMBER_BYTES = 2_000_000


@dataclass
class Found:
    student: str
    path: Path | None            # folder holding the milestone files (None: nothing gradable)
    problem: str = ""            # why nothing could be graded, for the student and instructor


def _safe_name(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._@-]+", "_", name).strip("._") or "student"
    return name[:80]


def notebook_to_source(text: str) -> str:
    """The code cells of a notebook as one module (IPython magics and shell lines dropped)."""
    nb = json.loads(text)
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _has_files(folder: Path, m: Milestone) -> bool:
    return all((folder / f).is_file() or (folder / (Path(f).stem + ".ipynb")).is_file() for f in m.files)


def _find_folder(root: Path, m: Milestone) -> Path | None:
    """The shallowest folder under root holding every milestone file; prefers the milestone's folder."""
    best: list[tuple[int, int, str, Path]] = []
    todo = [(root, 0)]
    while todo:
        folder, depth = todo.pop()
        if _has_files(folder, m):
            named = 0 if folder.name in (m.folder, m.id) else 1
            best.append((named, depth, str(folder), folder))
        if depth < MAX_DEPTH:
            try:
                kids = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                        and not p.name.startswith((".", "__"))]
            except OSError:
                kids = []
            todo.extend((k, depth + 1) for k in kids)
    return min(best)[3] if best else None


def _materialize(folder: Path, m: Milestone, dest: Path) -> Path:
    """Copy the milestone files (notebooks converted) into dest; return dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in m.files:
        py, nb = folder / f, folder / (Path(f).stem + ".ipynb")
        if py.is_file():
            (dest / f).write_bytes(py.read_bytes()[: MAX_MEMBER_BYTES + 1])
        else:
            (dest / f).write_text(notebook_to_source(nb.read_text(errors="replace")))
    return dest


def _from_zip(zpath: Path, m: Milestone, dest: Path) -> tuple[Path | None, str]:
    try:
        with zipfile.ZipFile(zpath) as z:
            members = {}
            for info in z.infolist():
                name = Path(info.filename.replace("\\", "/"))
                if info.is_dir() or any(p in ("..", "") for p in name.parts) or name.is_absolute():
                    continue
                if "__MACOSX" in name.parts:
                    continue
                members.setdefault(str(name.parent), {})[name.name] = info
            wanted = [(len(Path(parent).parts), parent, files) for parent, files in members.items()
                      if all(f in files or Path(f).stem + ".ipynb" in files for f in m.files)]
            if not wanted:
                return None, f"{zpath.name} holds no {', '.join(m.files)}"
            _, _, files = min(wanted, key=lambda w: (w[0], w[1]))
            dest.mkdir(parents=True, exist_ok=True)
            for f in m.files:
                info = files.get(f) or files[Path(f).stem + ".ipynb"]
                if info.file_size > MAX_MEMBER_BYTES:
                    return None, f"{zpath.name}: {info.filename} is larger than {MAX_MEMBER_BYTES // 1_000_000} MB"
                data = z.read(info)[: MAX_MEMBER_BYTES + 1]
                if info.filename.endswith(".ipynb"):
                    data = notebook_to_source(data.decode(errors="replace")).encode()
                (dest / f).write_bytes(data)
            return dest, ""
    except (zipfile.BadZipFile, OSError, ValueError, KeyError) as e:
        return None, f"{zpath.name} could not be read as a zip file ({type(e).__name__})"


def _student_from_zip(name: str) -> str:
    stem = name[:-4] if name.lower().endswith(".zip") else name
    canvas = re.match(r"^(.+?)_(?:late_)?\d+_", stem)
    return canvas.group(1) if canvas else stem


def collect(submissions: Path, m: Milestone, staging: Path) -> list[Found]:
    """Every student under `submissions`, in name order. Zips and notebooks are staged under `staging`."""
    root = Path(submissions)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    if (root / "submitted").is_dir():
        root = root / "submitted"
    found: dict[str, Found] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_file() and entry.suffix.lower() == ".zip":
            student = _safe_name(_student_from_zip(entry.name))
            key = student
            n = 2
            while key in found:
                key, n = f"{student}-{n}", n + 1
            path, problem = _from_zip(entry, m, staging / key)
            found[key] = Found(key, path, problem)
        elif entry.is_dir() and not entry.is_symlink():
            student = _safe_name(entry.name)
            folder = _find_folder(entry, m)
            if folder is None:
                found[student] = Found(student, None, f"no {', '.join(m.files)} found in {entry.name}/")
            elif any((folder / f).is_symlink() or (folder / (Path(f).stem + ".ipynb")).is_symlink()
                     for f in m.files):
                found[student] = Found(student, None, "a submitted file is a symbolic link; submit the file itself")
            elif all((folder / f).is_file() for f in m.files):
                found[student] = Found(student, folder)
            else:
                found[student] = Found(student, _materialize(folder, m, staging / student))
    return [found[k] for k in sorted(found)]
