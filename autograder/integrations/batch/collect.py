"""Find every student's submission in the layouts instructors get them in.

Accepted under SUBMISSIONS:
- one folder per student: `<student>/attention.py` (the files may sit deeper, e.g.
  `<student>/m1_attention/attention.py`, as in a cloned student repository);
- nbgrader's `submitted/<student>/<assignment>/` (SUBMISSIONS may be the course folder holding
  `submitted/`, or `submitted/` itself); a notebook `<module>.ipynb` stands in for `<module>.py`;
- a folder of zip files as LMS exports give them: `<student>.zip` (Canvas-style names
  `<student>_<ids>_<file>.zip` use the part before the first `_<digits>`).

Every entry gives exactly one `Found`: the student's name as it was, a key unique among the class
and safe as a file name (for the staging, feedback and results folders), and either a folder to
grade or a status and the reason nothing could be graded. Submitted files are read with the one rule
of grading.submission (regular files only, size-limited); zips are never extracted, only the
milestone's files are inflated, in chunks, with hard caps.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

from autograder.config import Milestone
from autograder.grading.submission import MAX_FILE_BYTES, SubmissionError, open_submitted, read_submitted

MAX_DEPTH = 4
MAX_NOTEBOOK_BYTES = 20_000_000     # notebooks carry their outputs (plots)
MAX_ZIP_BYTES = 100_000_000         # the zip file itself
MAX_ZIP_MEMBERS = 5000              # a whole repository with .git is fine, a virtualenv is not
MAX_ZIP_DIRECTORY_BYTES = 2_000_000   # zipfile parses the whole directory: bound it before it does
MAX_ZIP_OUTPUT = 25_000_000         # inflated bytes per archive, all members read together


@dataclass
class Found:
    student: str                 # the name as submitted (folder or zip name); shown, never a path
    key: str                     # unique in the class, safe as a file name: staging, feedback, results
    path: Path | None = None     # folder holding the milestone files (None: nothing gradable)
    problem: str = ""            # why nothing could be graded, for the student and instructor
    status: str = ""             # "" (gradable), "missing" or "refused"
    entry: Path | None = None    # the student's folder or zip as submitted (for its submission time)


def _slug(name: str) -> str:
    """Letters (any script), digits and . _ @ - of `name`; never hidden, never an option, at most 100 bytes."""
    slug = re.sub(r"[^\w.@-]+", "_", unicodedata.normalize("NFC", name)).lstrip(".-")
    slug = slug.encode("utf-8")[:100].decode("utf-8", "ignore")     # file names are limited in bytes
    return slug.rstrip(".") or "student"


def unique_key(name: str, taken: set[str]) -> str:
    """A file-name-safe key for `name`, distinct from every key in `taken` (which it joins).

    A name that is not its own slug gets a digest of the original, so that names differing only in
    what the slug drops (`bob` and `bob_`, `a/b` and `a_b`) never share a key. Keys are compared
    case-folded: on macOS and Windows `Bob/` and `bob/` are one folder."""
    slug = _slug(name)
    if slug != name:
        slug += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    key, n = slug, 2
    while key.casefold() in taken:          # the same name twice (two zips of one student)
        key, n = f"{slug}-{n}", n + 1
    taken.add(key.casefold())
    return key


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


def _source(name: str, data: bytes) -> bytes:
    """A submitted file's bytes as a module: a notebook becomes its code cells."""
    if not name.endswith(".ipynb"):
        return data
    try:
        return notebook_to_source(data.decode("utf-8", "replace")).encode("utf-8", "surrogatepass")
    except (ValueError, AttributeError, TypeError):
        raise SubmissionError(f"{name} is not a readable notebook (its JSON is broken)") from None


def _notebook(f: str) -> str:
    return Path(f).stem + ".ipynb"


def _has_files(folder: Path, m: Milestone) -> bool:
    # lexists: a link or FIFO named attention.py is there (and refused with a reason), not "missing"
    return all(os.path.lexists(folder / f) or os.path.lexists(folder / _notebook(f)) for f in m.files)


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


def from_folder(entry: Path, m: Milestone, dest: Path, where: str) -> Path:
    """The folder to grade for a student's folder `entry` (SubmissionError if none): the folder
    itself when it holds the .py files, else `dest` with the notebooks converted. `where`: how the
    messages name `entry` ("bob/", "your submission")."""
    folder = _find_folder(entry, m)
    if folder is None:
        raise SubmissionError(f"no {', '.join(m.files)} found in {where}", "missing")
    files = {f: f if os.path.lexists(folder / f) else _notebook(f) for f in m.files}
    data = {f: read_submitted(folder / name, MAX_NOTEBOOK_BYTES if name != f else MAX_FILE_BYTES)
            for f, name in files.items()}            # every file checked now, with the one rule
    if all(name == f for f, name in files.items()):
        return folder
    dest.mkdir(parents=True)
    for f, name in files.items():
        (dest / f).write_bytes(_source(name, data[f]))
    return dest


def _member_name(info: zipfile.ZipInfo) -> str:
    return info.filename.replace("\\", "/")


def _zip_members(z: zipfile.ZipFile, zname: str) -> dict[str, zipfile.ZipInfo]:
    """Every file member by name, or SubmissionError for an archive no honest tool makes."""
    members: dict[str, zipfile.ZipInfo] = {}
    seen: set[str] = set()
    for info in z.infolist():
        name = _member_name(info)
        parts = name.split("/")
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in parts:
            raise SubmissionError(f"{zname} holds {name!r}, a path outside the archive: zip only your files")
        if name in seen:
            raise SubmissionError(f"{zname} holds {name!r} twice: zip each file once")
        seen.add(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise SubmissionError(f"{zname} holds a symbolic link ({name}): zip the files themselves")
        if not info.is_dir() and "__MACOSX" not in parts:
            members[name] = info
    return members


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo, zname: str, limit: int) -> bytes:
    """A member's bytes, inflated in 64 KB steps and never more than `limit`: the sizes written in
    the archive are its author's claim (zipfile.read inflates a member whole, whatever it declares)."""
    name = _member_name(info)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise SubmissionError(f"{zname}: {name} uses a compression the grader does not read: "
                              f"make the zip again with the usual (deflate) compression")
    if info.file_size > limit:
        raise SubmissionError(f"{zname}: {name} is larger than {limit / 1_000_000:g} MB")
    out = bytearray()
    try:
        with z.open(info) as f:
            while chunk := f.read(65536):
                out += chunk
                if len(out) > limit:
                    raise SubmissionError(f"{zname}: {name} is larger than {limit / 1_000_000:g} MB")
    except zipfile.BadZipFile:      # e.g. more data than its header declared: the checksum fails
        raise SubmissionError(f"{zname}: {name} is damaged (its contents do not match the size and checksum "
                              f"recorded for it): make the zip again") from None
    return bytes(out)


def _check_directory(f, zname: str) -> None:
    """Refuse an archive listing too many members before zipfile parses its whole directory
    (200,000 empty members: 17 MB of zip, 7 s and 110 MB of memory to parse)."""
    end = zipfile._EndRecData(f)        # zipfile's own reader of the end-of-archive record
    if end is None:
        raise zipfile.BadZipFile
    if end[zipfile._ECD_ENTRIES_TOTAL] > MAX_ZIP_MEMBERS or end[zipfile._ECD_SIZE] > MAX_ZIP_DIRECTORY_BYTES:
        raise SubmissionError(f"{zname} holds more than {MAX_ZIP_MEMBERS} files: zip only the files to grade")


def from_zip(zpath: Path, m: Milestone, dest: Path) -> Path:
    """`dest` holding the milestone's files from the zip `zpath` (the shallowest folder of the
    archive holding all of them), or SubmissionError saying why not."""
    zname = zpath.name
    try:
        with open_submitted(zpath, MAX_ZIP_BYTES) as archive:
            _check_directory(archive, zname)
            with zipfile.ZipFile(archive) as z:
                members = _zip_members(z, zname)
                folders = {}
                for name in members:
                    folder, _, base = name.rpartition("/")
                    folders.setdefault(folder, set()).add(base)
                wanted = [folder for folder, names in folders.items()
                          if all(f in names or _notebook(f) in names for f in m.files)]
                if not wanted:
                    raise SubmissionError(f"{zname} holds no {', '.join(m.files)}", "missing")
                folder = min(wanted, key=lambda w: (w.count("/") if w else -1, w))
                prefix = f"{folder}/" if folder else ""
                data, total = {}, 0
                for f in m.files:
                    name = f if f in folders[folder] else _notebook(f)
                    limit = MAX_FILE_BYTES if name == f else MAX_NOTEBOOK_BYTES
                    data[f] = _source(name, _inflate(z, members[prefix + name], zname, min(limit, MAX_ZIP_OUTPUT - total)))
                    total += len(data[f])
    except SubmissionError:
        raise
    except Exception as e:   # a damaged or hostile archive can raise anything zipfile, zlib or the OS can
        raise SubmissionError(f"{zname} could not be read as a zip file: it is damaged or not a zip "
                              f"({type(e).__name__}); make it again") from None
    dest.mkdir(parents=True)
    for f, text in data.items():
        (dest / f).write_bytes(text)
    return dest


def _student_from_zip(name: str) -> str:
    stem = name[:-4] if name.lower().endswith(".zip") else name
    canvas = re.match(r"^(.+?)_(?:late_)?\d+_", stem)
    return canvas.group(1) if canvas else stem


def _entries(root: Path) -> list[tuple[str, Path]]:
    """(student, entry) for every student folder or zip under root, in name order. Hidden entries
    and loose files that are not zips are not submissions."""
    out = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        is_zip = entry.name.lower().endswith(".zip")
        if is_zip and (entry.is_file() or entry.is_symlink()):
            out.append((_student_from_zip(entry.name), entry))
        elif entry.is_dir():                 # a link to a folder too: it is refused with a reason
            out.append((entry.name, entry))
    return out


def collect(submissions: Path, m: Milestone, staging: Path) -> list[Found]:
    """One Found per student entry under `submissions`, in name order. Zips and notebooks are
    staged under `staging/<key>`."""
    root = Path(submissions)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    if (root / "submitted").is_dir():
        root = root / "submitted"
    taken: set[str] = set()
    found = []
    for student, entry in _entries(root):
        one = Found(student, unique_key(student, taken), entry=entry)
        try:
            if entry.is_symlink():
                raise SubmissionError(f"{entry.name} is a symbolic link: submit the folder or zip itself")
            if entry.is_dir():
                one.path = from_folder(entry, m, staging / one.key, f"{entry.name}/")
            else:
                one.path = from_zip(entry, m, staging / one.key)
        except SubmissionError as e:
            one.problem, one.status = str(e), e.status
        found.append(one)
    return found
