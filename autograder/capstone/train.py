"""`course train` and `course translate`: the course's promise that six files make a working Transformer.

    course train [--from DIR] [--task reverse] [--out DIR]      train, then report exact match on the test split
    course translate CHECKPOINT "3 March 2021"                  decode one input with a trained checkpoint

The modules come from the course's references (solutions/, markers stripped) or, with --from, from a
student's folder (their attention.py ... decoding.py; the course's data.py is always added).

Who does what:
- This process runs course code only. It makes the splits with the course's data.py, sends the child
  the training and validation pairs and the test SOURCES (never the test targets), and afterwards
  reads the token ids the child decoded, turns them into text with the course's own CharTokenizer
  and compares them with the test targets: every figure of the report (exact match greedy / beam /
  KV-cached, the cached-vs-greedy comparison, the samples) is computed here, never in a process that
  imported a student's file.
- The child (trainrun.py) imports the modules, trains and decodes. It is started by
  sandbox.launch (profile "trainer": threads, but no new processes, no programs, no sockets), under
  bubblewrap when it works (uid 65534 in a user namespace, no capability, only the module folder
  read-only and its private output folder), else, when this runs as root, as the unprivileged
  TRAIN_UID with no capability. It can write only into that private folder (size watched, files
  capped). Without bubblewrap and not as root nothing isolates it: `--from` is then refused unless
  the instructor passes --unsafe-no-sandbox.
- This process copies model.pt, training.png and attention.png (regular files only, capped sizes,
  never through a link) from the private folder into --out and writes summary.json there itself,
  never following a link planted there.
Checkpoints hold tensors and plain values only and are loaded with weights_only=True (in the child).
"""
from __future__ import annotations

import ast
import errno
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autograder import config
from autograder.authoring import markers
from autograder.capstone import progress
from autograder.grading.submission import SubmissionError, read_submitted
from autograder.sandbox import launch, slot

HERE = Path(__file__).resolve().parent
# The settings CI trains the reference with: small, and past 99% exact match in about 1,000 steps.
DEFAULTS = {"task": "reverse", "d_model": 64, "heads": 4, "layers": 2, "d_ff": 256, "dropout": 0.0, "batch": 64,
            "warmup": 100, "factor": 0.1, "smoothing": 0.0, "clip": None, "steps": 3000, "eval_every": 100,
            "stop_at": 0.998, "n_train": 20000, "n_val": 1000, "n_test": 1000, "seq_len": 10, "seed": 0,
            "threads": 2, "beam": 4}

TRAIN_UID = slot.BASE_UID - 2      # without bubblewrap, as root: below the grading slots' and the kernel's uids
TRAIN_LIMITS = {"memory": 8 * 1024 ** 3, "cpu": 8 * 3600, "nofile": 1024, "fsize": 256 * 1024 ** 2, "core": 0}
PRIVATE_BYTES = 1024 ** 3          # the child is stopped when its private folder holds more than this
PRIVATE_ENTRIES = 10_000           # ... or more files and folders than this
KEEP = {"model.pt": 256 * 1024 ** 2, "training.png": 32 * 1024 ** 2, "attention.png": 32 * 1024 ** 2}
RESULT_BYTES = 64 * 1024 ** 2      # the child's result.json (token ids)
CHECKPOINT_BYTES = 256 * 1024 ** 2
LINE_BYTES = 1 << 20               # longest stdout line of the child that is read
TRANSLATE_SECONDS = 300
EXIT_NOT_CONFINED = 71             # confine.py: the child refused to run student code with a privilege left
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class TrainError(Exception):
    """Training could not start or stopped: the message is for whoever ran `course train`."""


# ---- the modules --------------------------------------------------------------------------------

def assemble(course: config.Course, source: Path | None, folder: Path) -> dict[str, str]:
    """Write the modules into `folder`; return {file: where it came from}. A student's file must be a
    regular file (never a link, which would hand the child whatever it points at)."""
    origin = {}
    for m in course.milestones:
        for f in m.files:
            if source is not None:
                if not os.path.lexists(source / f):
                    if f == "decoding.py":
                        continue               # optional until milestone 6 is done: the course's greedy is used
                    raise TrainError(f"{source} has no {f}: `course train --from` needs your files of every "
                                     f"milestone ({', '.join(name for each in course.milestones for name in each.files)}).")
                try:
                    data = read_submitted(source / f)
                except SubmissionError as e:
                    raise TrainError(f"{source}: {e}") from None
                (folder / f).write_bytes(data)
                # A later milestone's folder carries the course's copies of the earlier files: say so.
                reference = markers.make_reference((course.root / "solutions" / m.folder / f).read_text(), f)
                origin[f] = "the course's reference copy" if data == reference.encode() else "yours"
            else:
                text = (course.root / "solutions" / m.folder / f).read_text()
                (folder / f).write_text(markers.make_reference(text, f))
                origin[f] = "course reference"
        for f in m.provided:
            shutil.copyfile(course.root / "solutions" / m.folder / f, folder / f)
            origin[f] = "provided by the course"
    return origin


def _course_file(course: config.Course, name: str) -> Path:
    for m in course.milestones:
        if name in m.files or name in m.provided:
            return course.root / "solutions" / m.folder / name
    raise TrainError(f"course.yaml names no {name}")


@lru_cache(maxsize=None)
def _course_code(course_root: str, data_py: str, training_py: str):
    """(make_task, CharTokenizer) of the COURSE, loaded in this process: data.py imported by path, and the
    reference CharTokenizer class of training.py (markers stripped) with the plain imports it needs."""
    spec = importlib.util.spec_from_file_location("_course_train_data", data_py)
    data = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = data
    spec.loader.exec_module(data)
    tree = ast.parse(markers.make_reference(Path(training_py).read_text(), "training.py"))
    keep = [n for n in tree.body if isinstance(n, ast.Import)
            or (isinstance(n, ast.ClassDef) and n.name == "CharTokenizer")]
    if not any(isinstance(n, ast.ClassDef) for n in keep):
        raise TrainError(f"{training_py} has no class CharTokenizer")
    namespace = {"__name__": "_course_train_tokenizer"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), training_py, "exec"), namespace)
    return data.make_task, namespace["CharTokenizer"]


def course_code(course: config.Course):
    return _course_code(str(course.root), str(_course_file(course, "data.py")),
                        str(_course_file(course, "training.py")))


# ---- isolation and the child ----------------------------------------------------------------------

@dataclass
class _Isolation:
    box: object            # sandbox.slot.Sandbox
    uid: int | None        # the uid the child becomes (as root without bubblewrap)
    note: str              # one line when bubblewrap is not used, else ""


def _isolation(source: Path | None, unsafe: bool) -> _Isolation:
    box = launch.isolation()
    if box.isolated:
        return _Isolation(box, None, "")
    if os.geteuid() == 0:
        return _Isolation(box, TRAIN_UID, f"Sandbox: no bubblewrap ({box.why_not}); the modules run as the "
                                          f"unprivileged uid {TRAIN_UID} with resource limits and a system-call "
                                          f"filter.")
    if source is not None and not unsafe:
        raise TrainError(f"refusing to run the files of {source} without a sandbox: {box.why_not}, and this is not "
                         f"root (which would run them as an unprivileged user), so they would run with all of your "
                         f"rights; install bubblewrap, or pass --unsafe-no-sandbox if you trust these files.")
    who = f"the files of {source}" if source is not None else "the course's reference files"
    return _Isolation(box, None, f"Sandbox: NOT isolated ({box.why_not}): {who} run as you, with resource limits "
                                 f"and a system-call filter only.")


class _Workspace:
    """A fresh temporary folder: modules/ (read-only for the child) and out/ (the only place it may write)."""

    def __init__(self, prefix: str, uid: int | None):
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.modules, self.out, self.uid = self.root / "modules", self.root / "out", uid
        self.modules.mkdir(mode=0o700)
        self.out.mkdir(mode=0o700)

    def share(self):
        """Without bubblewrap, as root: the child's uid may read modules/ (as its group) and owns out/."""
        if self.uid is None:
            return
        for p in (self.root, self.modules, *self.modules.iterdir()):
            os.chown(p, 0, self.uid)
            os.chmod(p, 0o750 if p.is_dir() else 0o640)
        os.chmod(self.root, 0o710)
        os.chown(self.out, self.uid, self.uid)

    def remove(self):
        for dirpath, dirs, _ in os.walk(self.root):     # a folder the child made unreadable is still removed
            for d in dirs:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
                except (OSError, NotImplementedError):
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class _Run:
    returncode: int
    error: dict | None
    stderr: str
    stopped: str | None        # why this process stopped the child, if it did


def _usage(folder: Path) -> tuple[int, int]:
    """(bytes on disk, entries) under `folder`, never following a link; counting stops past the caps."""
    used = entries = 0
    stack = [str(folder)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                if entries > PRIVATE_ENTRIES:
                    return used, entries
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
                used += max(st.st_blocks * 512, 0)
    return used, entries


def _lines(pipe):
    """Lines of a binary pipe, each at most LINE_BYTES (a longer line is skipped whole)."""
    while True:
        line = pipe.readline(LINE_BYTES)
        if not line:
            return
        if not line.endswith(b"\n") and len(line) >= LINE_BYTES:
            while (more := pipe.readline(LINE_BYTES)) and not more.endswith(b"\n"):
                pass
            continue
        yield line.decode("utf-8", "replace")


def _run_child(ws: _Workspace, iso: _Isolation, job: dict, on_progress=None, timeout: float | None = None,
               on_validation=None) -> _Run:
    """Run trainrun.py on `job` in the sandbox; its files land in ws.out."""
    (ws.modules / "job.json").write_text(json.dumps(job))
    script = ws.modules / "trainrun.py"
    shutil.copyfile(HERE / "trainrun.py", script)
    ws.share()
    env = dict(CHILD_ENV)
    home = "/tmp" if iso.box.isolated else str(ws.out)     # bubblewrap: a private size-limited /tmp
    env.update(HOME=home, TMPDIR=home, MPLCONFIGDIR=f"{home}/.mpl")
    cmd = launch.command([str(script), str(ws.modules), str(ws.out)], profile="trainer", limits=TRAIN_LIMITS,
                         env=env, cwd=ws.out, binds=[("ro", ws.modules, ws.modules), ("rw", ws.out, ws.out)],
                         uid=iso.uid, own=[ws.out], box=iso.box, landlock=True)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(CHILD_ENV), start_new_session=True)
    tail, stopped, done = bytearray(), [], threading.Event()

    def drain():                      # stderr: keep the last few kilobytes only
        while chunk := proc.stderr.read(65536):
            tail.extend(chunk)
            del tail[:-8192]

    def watch():                      # the private folder: stop the child when it holds too much
        while not done.wait(0.5):
            used, entries = _usage(ws.out)
            if used > PRIVATE_BYTES or entries > PRIVATE_ENTRIES:
                stopped.append(f"it wrote more than {PRIVATE_BYTES // 1024 ** 2} MB or {PRIVATE_ENTRIES:,} files "
                               f"into its folder")
                proc.kill()
                return

    def expire():
        stopped.append(f"it took longer than {timeout:.0f} s")
        proc.kill()

    threads = [threading.Thread(target=drain, daemon=True), threading.Thread(target=watch, daemon=True)]
    timer = threading.Timer(timeout, expire) if timeout else None
    for t in threads + ([timer] if timer else []):
        t.start()
    error = None
    try:
        for line in _lines(proc.stdout):
            if line.startswith("PROGRESS ") and on_progress is not None:
                try:
                    on_progress(json.loads(line[9:]))
                except (ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError):
                    pass              # not a progress line of ours
            elif line.startswith("VALIDATION ") and on_validation is not None:
                try:
                    on_validation(json.loads(line[11:]))
                except (ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError):
                    pass              # not a validation line of ours
            elif line.startswith("ERROR "):
                try:
                    e = json.loads(line[6:])
                    error = e if isinstance(e, dict) else error
                except ValueError:
                    pass
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        done.set()
        if timer:
            timer.cancel()
        for t in threads:
            t.join(timeout=5)
    return _Run(proc.returncode, error, bytes(tail).decode("utf-8", "replace"), stopped[0] if stopped else None)


def _stopped_without_result(run: _Run) -> str:
    if run.stopped:
        return f"this process stopped it: {run.stopped}"
    if run.returncode == EXIT_NOT_CONFINED:
        return ("it refused to run student code while it still had root's privileges (exit status 71): nothing "
                "isolates it here")
    return f"exit status {run.returncode}\n{run.stderr[-1500:]}"


# ---- files out of the private folder ---------------------------------------------------------------

class _Refused(Exception):
    pass


def _open_private(folder: Path, name: str, cap: int):
    """Open folder/name for reading: a regular file of at most `cap` bytes, never through a link.
    None when there is no such file; _Refused(why) when there is something else."""
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _Refused(f"{name} is a symbolic link or cannot be read ({e.strerror})") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
        os.close(fd)
        raise _Refused(f"{name} is not a regular file" if not stat.S_ISREG(st.st_mode)
                       else f"{name} is larger than {cap // 1024 ** 2} MB")
    return os.fdopen(fd, "rb")


def _read_private(folder: Path, name: str, cap: int) -> bytes | None:
    f = _open_private(folder, name, cap)
    if f is None:
        return None
    with f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise _Refused(f"{name} is larger than {cap // 1024 ** 2} MB")
    return data


def _open_out(dir_fd: int, name: str, shown: str):
    """Open `name` in --out for writing from scratch, never through what is there: a symbolic link, a hard
    link to another file or a FIFO is replaced by a new regular file (what it pointed at is untouched)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                     dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ETXTBSY):
            raise
        fd = None
    if fd is not None:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.ftruncate(fd, 0)
            return os.fdopen(fd, "wb")
        os.close(fd)
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError as e:
        raise TrainError(f"could not replace {shown} ({e.strerror}): remove it and run again") from None
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    return os.fdopen(fd, "wb")


def _copy_out(private: Path, out_fd: int, out: Path, name: str) -> str | None:
    """Copy private/name into --out (see _open_private, _open_out). Returns why not, or None."""
    try:
        src = _open_private(private, name, KEEP[name])
    except _Refused as e:
        return str(e)
    if src is None:
        return f"{name} was not written"
    with src, _open_out(out_fd, name, str(out / name)) as dst:
        copied = 0
        while chunk := src.read(1 << 20):
            copied += len(chunk)
            if copied > KEEP[name]:
                dst.truncate(0)
                return f"{name} is larger than {KEEP[name] // 1024 ** 2} MB"
            dst.write(chunk)
    return None


def _write_out(out_fd: int, out: Path, name: str, data: bytes):
    with _open_out(out_fd, name, str(out / name)) as f:
        f.write(data)


# ---- what the child wrote, checked and scored here ------------------------------------------------

def _ids(rows, count: int | None, longest: int, what: str) -> list[list[int]]:
    """Token id rows as the child wrote them: `count` lists (any count if None) of at most `longest` ints."""
    if (not isinstance(rows, list) or (count is not None and len(rows) != count)
            or not all(isinstance(r, list) and len(r) <= longest and
                       all(type(i) is int and 0 <= i < 2 ** 31 for i in r) for r in rows)):
        raise TrainError(f"the trainer's {what} outputs are not {count if count is not None else ''} lists of "
                         f"token ids: a module changed the trainer's output")
    return rows


def _number(x, default=0.0) -> float:
    return float(x) if type(x) in (int, float) and x == x and abs(x) < 1e18 else default


def _text(tok, row: list[int]) -> str:
    """Ids -> text with the course's tokenizer (an id it does not know reads as <unk>)."""
    return tok.decode([i if i < tok.vocab_size else tok.unk_id for i in row])


def _score(child: dict, conf: dict, tok, test: list[tuple[str, str]], longest: int) -> dict:
    n = len(test)
    targets = [tok.decode(tok.encode(t)) for _, t in test]
    greedy = [_text(tok, r) for r in _ids(child.get("greedy"), n, longest, "greedy")]

    def match(outputs):
        return sum(a == b for a, b in zip(outputs, targets)) / max(1, n)

    steps = child.get("steps")
    steps = steps if type(steps) is int and 0 <= steps <= conf["steps"] else conf["steps"]
    best = child.get("best_step")
    seconds = child.get("seconds") if isinstance(child.get("seconds"), dict) else {}
    val = child.get("val") if isinstance(child.get("val"), list) else []
    result = {"task": conf["task"], "steps": steps,
              "best_step": best if type(best) is int and 0 <= best <= steps else steps,
              "train_seconds": _number(child.get("train_seconds")), "test_size": n,
              "exact_match_greedy": match(greedy),
              "samples": [(tok.decode(tok.encode(s)), t, got) for (s, _), t, got in zip(test[:6], targets, greedy)],
              "val": [[int(_number(e[0])), _number(e[1]), _number(e[2])] for e in val[:10_000]
                      if isinstance(e, list) and len(e) == 3],
              "decoding": child.get("decoding") if child.get("decoding") in ("decoding.py", "the course's greedy")
              else "decoding.py",
              "seconds": {k: _number(seconds.get(k)) for k in ("greedy", "beam", "cached") if k in seconds}}
    if "beam" in child:
        result["beam"] = conf["beam"]
        result["exact_match_beam"] = match([_text(tok, r) for r in _ids(child["beam"], n, longest, "beam")])
    if "cached" in child:
        cached = [_text(tok, r) for r in _ids(child["cached"], n, longest, "KV-cached")]
        result["exact_match_cached"] = match(cached)
        result["cached_same_as_greedy"] = sum(a == b for a, b in zip(cached, greedy))
        result["seconds"].setdefault("cached", 0.0)
        result["seconds"].setdefault("greedy", 0.0)
    if isinstance(child.get("temperature"), dict):
        result["temperature_samples"] = {
            t: [_text(tok, r) for r in _ids(child["temperature"].get(t), None, longest, "sampled")][:3]
            for t in ("0.5", "1.0", "1.5") if t in child["temperature"]}
    note = child.get("attention_png")
    result["attention_png"] = note[:200] if isinstance(note, str) else "not saved"
    ids, vocab = child.get("ids"), child.get("vocab_ids")
    if ids != {"pad": 0, "bos": 1, "eos": 2, "unk": 3} or vocab != list(range(4, tok.vocab_size)):
        result["tokenizer_note"] = ("Your CharTokenizer numbers tokens differently from the course's (<pad> <bos> "
                                    "<eos> <unk> = 0 1 2 3, then the characters in sorted order): the outputs were "
                                    "read with the course's numbering, so these figures may not be your model's.")
    return result


# ---- course train ---------------------------------------------------------------------------------

def _bar(p: dict) -> str:
    extra = f"  val {p['val_em']:.1%}" if "val_em" in p else ""
    return progress.line(p["step"], p["steps"], p["elapsed"], f"step {p['step']}/{p['steps']}  loss {p['loss']:.4f}  "
                         f"{p['tok_s']:,.0f} tok/s{extra}", left="left at most")


def train(course: config.Course, source: Path | None, out: Path, overrides: dict | None = None,
          stream=sys.stdout, unsafe: bool = False) -> dict:
    """Train the modules (the course's, or the student's in `source`) in the sandbox; report figures
    computed here. `unsafe`: run a student's files even where nothing can isolate them."""
    conf = {**DEFAULTS, **(overrides or {})}
    source = Path(source).resolve() if source else None
    iso = _isolation(source, unsafe)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    make_task, CharTokenizer = course_code(course)
    opts = {} if conf["task"] == "dates" else {"min_len": 1, "max_len": conf["seq_len"]}
    splits = make_task(conf["task"], conf["n_train"], conf["n_val"], conf["n_test"], seed=conf["seed"], **opts)
    tok = CharTokenizer([s for pair in splits.train for s in pair])
    vocab = "".join(tok.decode([i]) for i in range(4, tok.vocab_size))
    longest = max(len(tok.encode(t)) for _, t in splits.train + splits.val + splits.test) + 2
    job = {"conf": conf, "train": splits.train, "val": splits.val, "test": [s for s, _ in splits.test],
           "max_out": longest, "vocab": vocab}
    ws = _Workspace("course-train-", iso.uid)
    try:
        origin = assemble(course, source, ws.modules)
        stream.write(f"Training a Transformer on `{conf['task']}` with " +
                     ", ".join(f"{f} ({o})" for f, o in origin.items()) + "\n")
        if iso.note:
            stream.write(iso.note + "\n")
        live = getattr(stream, "isatty", lambda: False)()

        def progress(p):
            if not all(type(p.get(k)) in (int, float) for k in ("step", "steps", "loss", "tok_s", "elapsed")):
                return
            if live or "val_em" in p:       # a log gets one line per evaluation, a terminal a live bar
                stream.write(_bar(p) if live else _bar(p).strip("\r ") + "\n")
                stream.flush()

        run = _run_child(ws, iso, job, progress)
        stream.write("\n")
        if run.error:
            e = run.error
            where = f"{e.get('file')}, line {e.get('line')}" if e.get("file") else "the course's code"
            code = f"\n    {str(e['code'])[:300]}" if e.get("code") else ""
            raise TrainError(f"Training stopped at the {str(e.get('stage'))[:40]} stage: {str(e.get('type'))[:80]} "
                             f"in {where}: {str(e.get('message'))[:500]}{code}")
        try:
            data = _read_private(ws.out, "result.json", RESULT_BYTES) if run.returncode == 0 else None
            child = json.loads(data) if data else None
        except (_Refused, ValueError) as e:
            raise TrainError(f"Training stopped without a readable result: {e}") from None
        if not isinstance(child, dict):
            raise TrainError(f"Training stopped without a result ({_stopped_without_result(run)})")
        result = _score(child, conf, tok, splits.test, longest + 2)
        result["origin"] = origin
        out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            refused = [why for name in KEEP if (why := _copy_out(ws.out, out_fd, out, name))]
            if any(w.startswith("attention.png") for w in refused) and result["attention_png"].startswith("saved"):
                result["attention_png"] = "not saved: " + next(w for w in refused if w.startswith("attention.png"))
            if refused:
                result["not_copied"] = refused
            _write_out(out_fd, out, "summary.json", json.dumps(result, indent=2).encode())
        finally:
            os.close(out_fd)
    finally:
        ws.remove()
    return result


def report(result: dict, stream=sys.stdout) -> None:
    kept = (f"; kept the weights of step {result['best_step']}, the best on the validation split"
            if result.get("best_step", result["steps"]) != result["steps"] else "")
    stream.write(f"Trained {result['steps']} steps in {result['train_seconds']:.0f} s{kept}; test split: "
                 f"{result['test_size']} inputs never seen in training.\n")
    stream.write(f"exact match (greedy): {result['exact_match_greedy']:.1%}\n")
    if "exact_match_beam" in result:
        stream.write(f"exact match (beam {result.get('beam', 4)}): {result['exact_match_beam']:.1%}\n")
    if "cached_same_as_greedy" in result:
        n, total = result["cached_same_as_greedy"], result["test_size"]
        stream.write(f"KV-cached greedy: {'identical' if n == total else 'DIFFERENT'} outputs on {n} of {total} test "
                     f"inputs ({result['seconds']['cached']:.1f} s vs {result['seconds']['greedy']:.1f} s uncached)\n")
    for src, tgt, got in result["samples"][:4]:
        mark = "ok" if got == tgt else "WRONG"
        stream.write(f"  {src!r:>24} -> {got!r}  ({mark}; expected {tgt!r})\n")
    for temp, outs in (result.get("temperature_samples") or {}).items():
        stream.write(f"  sampled at temperature {temp}: {outs}\n")
    stream.write(f"Attention heatmaps: {result.get('attention_png', 'not saved')}.\n")
    if result.get("tokenizer_note"):
        stream.write(result["tokenizer_note"] + "\n")
    for why in result.get("not_copied", []):
        stream.write(f"Not copied to the output folder: {why}.\n")
    if result["exact_match_greedy"] < 0.99 and result["steps"] >= DEFAULTS["steps"]:
        stream.write("This model did not reach 99% exact match: the course's reference does on `reverse` in about "
                     "1,000 steps. Check train_step, the loss and make_batch (the tgt_in / tgt_out shift) with the "
                     "public tests of milestone 5.\n")


# ---- course translate -----------------------------------------------------------------------------

def translate(course: config.Course, checkpoint: Path, text: str, source: Path | None = None,
              beam: int | None = None, unsafe: bool = False) -> str:
    """Decode `text` (greedy, or beam search with `beam` hypotheses) with a checkpoint of `course train`.
    The checkpoint is loaded (weights_only=True) and decoded in the sandboxed child; this process turns
    the ids into text with the course's tokenizer and the checkpoint's vocabulary."""
    source = Path(source).resolve() if source else None
    iso = _isolation(source, unsafe)
    if iso.note and iso.uid is None:
        sys.stderr.write(iso.note + "\n")
    checkpoint = Path(checkpoint)
    ws = _Workspace("course-translate-", iso.uid)
    try:
        assemble(course, source, ws.modules)
        try:
            with os.fdopen(os.open(checkpoint, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise TrainError(f"could not decode with {checkpoint}: not a regular file")
                data = f.read(CHECKPOINT_BYTES + 1)
        except OSError as e:
            raise TrainError(f"could not decode with {checkpoint}: {e.strerror}") from None
        if len(data) > CHECKPOINT_BYTES:
            raise TrainError(f"could not decode with {checkpoint}: larger than {CHECKPOINT_BYTES // 1024 ** 2} MB")
        (ws.modules / "model.pt").write_bytes(data)
        job = {"conf": {"threads": 1}, "translate": text, "checkpoint": "model.pt", "beam": beam}
        run = _run_child(ws, iso, job, timeout=TRANSLATE_SECONDS)
        if run.error:
            raise TrainError(f"could not decode with {checkpoint}: {str(run.error.get('type'))[:80]}: "
                             f"{str(run.error.get('message'))[:500]}")
        try:
            got = _read_private(ws.out, "result.json", 1024 ** 2) if run.returncode == 0 else None
            got = json.loads(got) if got else None
        except (_Refused, ValueError) as e:
            raise TrainError(f"could not decode with {checkpoint}: {e}") from None
        if not isinstance(got, dict):
            raise TrainError(f"could not decode with {checkpoint}: {_stopped_without_result(run)[-500:]}")
        texts = got.get("texts")
        if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts) and sum(map(len, texts)) < 10 ** 5):
            raise TrainError(f"could not decode with {checkpoint}: its vocabulary is not a list of texts")
        ids = _ids([got.get("ids")], 1, 64, "decoded")[0]
        _, CharTokenizer = course_code(course)
        return _text(CharTokenizer(texts), ids)
    finally:
        ws.remove()
