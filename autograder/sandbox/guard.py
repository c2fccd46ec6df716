"""The guard: the grader's observers inside the worker, and what keeps student code away from them.

Standalone source, never imported: the worker's text starts with this file (see slot.py). The fork
server runs `install()` once, before any reference or student module exists; each forked worker then
gets its own key (`start`) and arms it (`course.arm`). What it sets up:

- An audit hook (PEP 578: it cannot be removed from Python). Its state, the *ledger*, lives only in the
  hook's keyword defaults, which no Python code can read or change without raising an audit event of its
  own. The ledger holds what the judge decides from: torch functions called, ATen ops and their counts,
  matrix-multiply FLOPs, events sent by the grader's own models, evidence of tampering, and which
  tensor storages observed operations made (provenance).
- Two observers pushed once and never popped: a TorchFunctionMode and a TorchDispatchMode. They are on
  for every request, so student code cannot tell a measured call from any other. They only report to
  the hook, and the hook accepts a report only while the reporting mode is off its stack, i.e. only when
  PyTorch itself dispatched to it. Op names come from the hook's own table of operators, never from
  attributes student code could rename.
- Tripwires in place of torch's private APIs that read, pop, push or switch off modes or dispatch keys,
  and of the ways to run code the observers would not see (custom operators, TorchScript,
  torch.compile), in every module that holds them. A tripwire asks the hook, which runs the original
  only for a caller that is torch's own code naming that API (under any name torch knows it by).
- Detection, with certainty, of the ways to reach the grader's objects: stack frames (sys._getframe,
  tracebacks', generators' and coroutines' frames, stack walks that student code starts through inspect
  or traceback), the garbage collector's object walks, tracing and profiling hooks, new audit hooks,
  ctypes, a process's memory file (/proc/<pid>/mem), the code or defaults of the grader's functions, code compiled under another
  file's name, and changes to torch's dispatch glue. Detection ends the worker at once (EXIT_TAMPER)
  after writing a sealed reply with the evidence: student code never receives what it asked for, and
  nothing it does afterwards can hide the evidence.
- A seal: every reply frame ends with an HMAC-SHA256 of (sequence number, body), keyed by a secret only
  the judge and the hook hold. The ledger is put into the body by the hook itself, so student code (even
  one that replaced torch.save or any function the worker calls) can neither forge nor edit it.

Provenance catches observers switched off by means the tripwires do not know: a tensor whose storage no
observed operation made, used by an observed operation or returned to the judge, is evidence of
computation the grader did not see.
"""
import _hashlib
import builtins as _builtins
import marshal as _marshal
import sys as _sys

EXIT_TAMPER = 86

# Standard audit events the hook looks at once armed (any other event returns at once).
_WATCH = frozenset({
    "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "object.__getattr__", "object.__setattr__",
    "import", "open", "compile", "code.__new__", "function.__new__", "marshal.loads",
})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_STACK_APIS = frozenset({"currentframe", "stack", "trace", "getouterframes", "getinnerframes", "walk_stack",
                         "walk_tb"})
_STACK_LIBS = ("/inspect.py", "/traceback.py")
# ATen ops that do no arithmetic: a vectorized version may use more or fewer of them.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "clone", "expand", "transpose", "t", "permute", "squeeze", "unsqueeze",
    "reshape", "detach", "alias", "as_strided", "_reshape_alias", "contiguous", "unflatten",
    "flatten", "view_as", "expand_as", "slice", "select", "split", "chunk", "unbind", "lift_fresh",
    "_to_copy", "copy_", "empty_like", "movedim", "narrow", "diagonal", "split_with_sizes",
})
# Matrix products whose FLOPs are counted. Under torch.inference_mode() PyTorch does not decompose linear, matmul
# and einsum into mm / bmm before the observer sees them, so those are counted as they come.
_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "einsum"})
# ATen ops whose inputs were made from Python data just before (torch.tensor([...])).
_FROM_DATA_OPS = frozenset({"lift_fresh", "lift_fresh_copy"})
# Tensor methods that hand a tensor's data to Python or numpy (work on it is invisible to the op counter).
_DATA_OUT = frozenset({"numpy", "tolist", "__array__", "data_ptr", "untyped_storage", "storage", "_typed_storage",
                       "__dlpack__"})
# torch functions that make tensors from Python or numpy data without an ATen op.
_MADE_FROM_DATA = ("from_numpy", "as_tensor", "asarray", "tensor", "frombuffer", "from_dlpack")

# torch's private APIs that read, pop, push or switch off modes or the dispatch keys they live on, or that
# run code the observers would not see (TorchScript, custom operator libraries).
_C_TRIPWIRES = (
    "DisableTorchFunction", "_DisableTorchDispatch", "_EnablePythonDispatcher", "_DisablePythonDispatcher",
    "_EnablePreDispatch", "_EnableTorchFunction", "_ExcludeDispatchKeyGuard", "ExcludeDispatchKeyGuard",
    "_IncludeDispatchKeyGuard", "_SetExcludeDispatchKeyGuard", "_dispatch_tls_set_dispatch_key_excluded",
    "_dispatch_tls_set_dispatch_key_included", "_get_dispatch_mode", "_get_dispatch_stack_at",
    "_get_function_stack_at", "_pop_torch_dispatch_stack", "_pop_torch_function_stack", "_set_dispatch_mode",
    "_unset_dispatch_mode", "_set_torch_function_state", "_set_skip_next_torch_function",
    "_skip_one_hop_torch_function", "_dispatch_library", "_jit_script_compile", "_jit_script_class_compile",
    "_jit_script_compile_overload", "_jit_script_interface_compile", "_create_function_from_trace",
    "_create_function_from_trace_with_dict", "import_ir_module", "import_ir_module_from_buffer",
    "_load_for_lite_interpreter", "_load_for_lite_interpreter_from_buffer", "CompilationUnit",
    "_unsafe_set_version_counter",
    # reading whether a mode is on (code that behaves only when watched)
    "_is_torch_function_mode_enabled", "_len_torch_function_stack", "_len_torch_dispatch_stack",
    "_is_torch_function_enabled", "_is_torch_function_all_disabled", "_get_torch_function_state",
    "_has_torch_function", "_has_torch_function_unary", "_has_torch_function_variadic",
)
_PY_TRIPWIRES = {
    "torch.utils._python_dispatch": ("_get_current_dispatch_mode", "_get_current_dispatch_mode_stack", "_pop_mode",
                                     "_pop_mode_temporarily", "_disable_current_modes", "_disable_infra_mode",
                                     "_unset_infra_mode", "_detect_infra_mode", "is_in_torch_dispatch_mode",
                                     "any_torch_dispatch_mode_on_stack",
                                     "is_in_any_mode_without_ignore_compile_internals"),
    "torch.overrides": ("_get_current_function_mode", "_get_current_function_mode_stack", "_pop_mode",
                        "_pop_mode_temporarily", "_no_torch_function_mode"),
    "torch._ops": ("_get_dispatch_mode_pre_dispatch", "unset_mode_pre_dispatch", "_pop_mode_from_pre_dispatch",
                   "_get_current_dispatch_mode_pre_dispatch"),
    "torch.library": ("Library", "custom_op", "define", "impl", "register_kernel", "register_fake",
                      "register_autograd", "register_torch_dispatch", "register_vmap", "_scoped_library",
                      "impl_abstract"),
    "torch.jit": ("script", "trace", "trace_module", "load", "freeze", "script_if_tracing"),
    "torch": ("compile",),
}
# The import system's loaders of extension and built-in modules (a second load gives fresh originals).
_LOADERS = ("create_dynamic", "create_builtin", "exec_dynamic", "exec_builtin")
# torch's dispatch glue: replacing any of these would let code choose what the observers see.
_GLUE_MODULES = ("torch.overrides", "torch.utils._python_dispatch", "torch._ops")
_GLUE_NAMES = ("handle_torch_function", "has_torch_function", "has_torch_function_unary",
               "has_torch_function_variadic")


# ---- functions student code can reach: they hold nothing but keyword defaults ----------------------

def _tripwire(*args, _name=None, _audit=None, **kwargs):
    holder = []
    _audit("course.gate", _name, args, kwargs, holder)
    if not holder:
        raise RuntimeError(f"{_name} is not available to student code")
    if holder[0]:
        raise holder[1]
    return holder[1]


def _fn_observe(self, func, types, args=(), kwargs=None, *, _report=None, _made=None):
    _report(self, func, None, None)
    result = func(*args, **(kwargs or {}))
    if func in _made:
        _report(self, func, result, args)
    return result


def _op_observe(self, func, types, args=(), kwargs=None, *, _report=None, _kernels=None):
    kwargs = kwargs or {}
    kernel = _kernels.get(func)           # the operator's own kernel, straight (not OpOverload.__call__)
    out = func(*args, **kwargs) if kernel is None else kernel(*args, **kwargs)
    _report(self, func, args, kwargs, out)
    return out


# ---- the hook and its helpers: unreachable, and built on a private copy of builtins -----------------

def _tensors(x, into, s, depth=6):
    """Every tensor in a nested tuple / list / dict (down to `depth` levels), without running any method
    a student class defines."""
    Tensor = s["Tensor"]
    t = type(x)
    if t is tuple or t is list:
        if depth:
            for v in x:
                tv = type(v)
                if tv is Tensor or issubclass(tv, Tensor):
                    into.append(v)
                elif tv is tuple or tv is list or tv is dict:
                    _tensors(v, into, s, depth - 1)
    elif t is Tensor or issubclass(t, Tensor):
        into.append(x)
    elif depth and t is dict:
        for v in dict.values(x):
            _tensors(v, into, s, depth - 1)
    return into


def _pack(x, s, depth=0):
    """An event's payload as marshal data: tensors as ("__tensor__", dtype, shape, bytes), other values
    as they are when plain, else their type's name."""
    t = type(x)
    if issubclass(t, s["Tensor"]):
        try:
            v = s["contiguous"](s["detach"](x))
            dtype = str(s["dtype"](v)).replace("torch.", "")
            return ("__tensor__", dtype, tuple(s["size"](v)), s["numpy"](v).tobytes())
        except Exception:
            return None
    if x is None or t in (bool, int, float, str, bytes):
        return x
    if depth < 4 and (t is tuple or t is list):
        return t(_pack(v, s, depth + 1) for v in x)
    if depth < 4 and t is dict:
        return {k: _pack(v, s, depth + 1) for k, v in dict.items(x) if type(k) is str}
    return s["type_name"](t)


def _mm_flops(name, args, s):
    """2 x multiply-adds of a matrix product (as torch.utils.flop_counter counts them), else 0."""
    size = s["size"]
    try:
        if name == "mm":
            (m, k), n = size(args[0]), size(args[1])[1]
            return 2 * m * k * n
        if name == "addmm":
            (m, k), n = size(args[1]), size(args[2])[1]
            return 2 * m * k * n
        if name == "bmm":
            (b, m, k), n = size(args[0]), size(args[1])[2]
            return 2 * b * m * k * n
        if name == "baddbmm":
            (b, m, k), n = size(args[1]), size(args[2])[2]
            return 2 * b * m * k * n
        if name == "linear":                      # input [..., in], weight [out, in]
            rows = 1
            for d in tuple(size(args[0]))[:-1]:
                rows *= d
            out_features, in_features = size(args[1])
            return 2 * rows * in_features * out_features
        if name == "matmul":                      # [..., m, k] @ [..., k, n], 1-D operands as a row / a column
            a, b = tuple(size(args[0])), tuple(size(args[1]))
            a, b = (a if len(a) > 1 else (1,) + a), (b if len(b) > 1 else b + (1,))
            lead_a, lead_b = a[:-2], b[:-2]
            width = max(len(lead_a), len(lead_b))
            lead_a, lead_b = (1,) * (width - len(lead_a)) + lead_a, (1,) * (width - len(lead_b)) + lead_b
            batch = 1
            for x, y in zip(lead_a, lead_b):
                batch *= max(x, y)
            return 2 * batch * a[-2] * a[-1] * b[-1]
        if name == "einsum":                      # two or more operands: 2 x the product of every index's size
            equation, operands = args[0], args[1]
            if type(equation) is not str or len(operands) < 2:
                return 0
            sizes = {}
            for term, t in zip(equation.split("->")[0].split(","), operands):
                for letter, d in zip(term.strip(), tuple(size(t))):
                    sizes[letter] = d
            total = 2
            for d in sizes.values():
                total *= d
            return total
    except Exception:
        return 0
    return 0


def _code_owner(frame, s):
    """'grader', 'student' or 'library': who wrote the code running in `frame`."""
    code = frame.f_code
    if code in s["worker"]:
        return "grader"
    if code in s["library"]:      # the grader's recipes, stand-ins and wrappers: no more rights than a library
        return "library"
    name = code.co_filename
    if type(name) is not str or (name[:1] == "<" and not name.startswith("<frozen ")) \
            or name.startswith(s["student_dirs"]):
        return "student"
    return "library"


def _student_asked(frame, s):
    """Did student code ask for what `frame` is doing? Directly, or by calling one of inspect's or
    traceback's functions that hand frames back (not those that only format text)."""
    owner = _code_owner(frame, s)
    if owner != "library":
        return owner == "student"
    if not frame.f_code.co_filename.endswith(_STACK_LIBS):
        return False
    api, caller = frame, frame.f_back
    while caller is not None and caller.f_code.co_filename.endswith(_STACK_LIBS):
        api, caller = caller, caller.f_back
    return caller is not None and _code_owner(caller, s) == "student" and api.f_code.co_name in _STACK_APIS


def _where(frame, s):
    """'file.py, line N' of the first student frame at or above `frame`."""
    f = frame
    while f is not None and _code_owner(f, s) != "student":
        f = f.f_back
    f = f or frame
    return f"{f.f_code.co_filename.rsplit('/', 1)[-1]}, line {f.f_lineno}"


def _tamper(s, what, frame):
    """Seal the evidence into a reply written straight to the judge, then end the process."""
    try:
        where = _where(frame, s) if frame is not None else "unknown place"
    except Exception:
        where = "unknown place"
    s["tamper"].append(f"{what} ({where})")
    try:
        payload = _marshal.dumps({"ok": False, "kind": "tamper", "type": "IntegrityError",
                                  "message": f"{what} ({where})", "traceback": ""})
        s["write"](s["fd"], _seal(s, payload))
    finally:
        s["exit"](EXIT_TAMPER)


def _seal(s, payload):
    """One reply frame: length, body (the payload and the ledger), HMAC of the sequence number and body."""
    ledger = {"functions": sorted(s["functions"]), "ops": dict(s["ops"]), "op_count": s["op_count"],
              "flops": s["flops"], "grad_ops": s["grad_ops"], "numpy": s["outside"], "events": list(s["events"]),
              "unobserved": list(s["unobserved"]), "tamper": list(s["tamper"]), "seq": s["seq"]}
    body = _marshal.dumps((payload, ledger))
    mac = _hashlib.hmac_digest(s["key"], s["seq"].to_bytes(8, "big") + body, "sha256")
    s["seq"] += 1
    return (len(body) + len(mac)).to_bytes(4, "big") + body + mac


def _storage(t, s):
    try:
        return s["untyped_storage"](t)
    except Exception:       # sparse, nested or functional tensors have no storage: nothing to vouch for
        return None


def _key(t, s):
    storage = _storage(t, s)
    return None if storage is None else s["cdata"](storage)


def _known(t, s):
    storage = _storage(t, s)
    if storage is None:
        return True
    handle = s["known"].get(s["cdata"](storage))
    return handle is not None and not s["expired"](handle)


def _vouch(t, s):
    """Remember the storage of `t` as made by an observed operation. The guard holds a weak reference to
    it (a storage's address is not reused while one exists), so a later storage at the same address is
    never taken for this one."""
    storage = _storage(t, s)
    if storage is None:
        return
    key = s["cdata"](storage)
    handle = s["known"].get(key)
    if handle is not None:
        if not s["expired"](handle):
            return
        s["free"](handle)
    s["known"][key] = s["weak_ref"](storage)


def _prune(s):
    """Forget storages that no longer exist."""
    known = s["known"]
    for key in [k for k, h in known.items() if s["expired"](h)]:
        s["free"](known.pop(key))


def _unobserved(s, what):
    if len(s["unobserved"]) < 20 and what not in s["unobserved"]:
        s["unobserved"].append(what)


def _off_stack(mode, s, kind):
    """True when `mode` is not on its stack: PyTorch pops a mode while that mode's handler runs."""
    at = s["at_" + kind]
    for i in range(s["len_" + kind]()):
        if at(i) is mode:
            return False
    return True


def _op_entry(mode, func, a, kw, out, *, _s=None):
    """What the operation observer reports, for each ATen op PyTorch dispatched to it. Only that observer
    holds this function (in its keyword defaults), and it reports only while PyTorch has it off the stack."""
    s = _s
    if s["busy"]:                 # the guard's own work (packing an event's tensors)
        return
    if mode is not s["op_mode"] or not _off_stack(mode, s, "dispatch"):
        return _tamper(s, "the grader's operation observer was called by student code", s["getframe"](1))
    try:
        entry = s["op_names"].get(func)      # (hashing by identity: no builtins.id audit event per op)
    except Exception:
        entry = None
    if entry is None:
        name, kind = "unknown", "new"
        _unobserved(s, "an operator the grader does not know (a custom operator?)")
    else:
        name, op, real, kind = entry
        if op.__dict__.get("_op") is not real:
            return _tamper(s, f"student code replaced the kernel of aten::{name}", s["getframe"](1))
    with s["no_tf"]():            # (tensor methods below must not reach the function observer)
        if name in _FROM_DATA_OPS:                # torch.tensor([...]): its data just came from Python
            for t in _tensors(out, [], s):
                _vouch(t, s)
        elif kind == "view":      # a view shares its input's storage (then nothing is new) or copies it
            given = {_key(t, s) for t in _tensors((a, kw), [], s)}
            for t in _tensors(out, [], s):
                if _key(t, s) not in given:
                    _vouch(t, s)
        else:
            for t in _tensors((a, kw), [], s):
                if not _known(t, s):
                    _unobserved(s, f"aten::{name} (an input of shape {list(s['size'](t))})")
            if kind == "new":
                for t in _tensors(out, [], s):
                    _vouch(t, s)
        if s["counting"]:
            key = "aten::" + name
            s["ops"][key] = s["ops"].get(key, 0) + 1
            if name not in VIEW_OPS:
                s["op_count"] += 1
            if name in _MATMULS:
                s["flops"] += _mm_flops(name, a, s)
            if s["grad_on"]():            # an autograd graph is being built for this op?
                for t in _tensors((a, kw), [], s):
                    if s["requires_grad"](t):
                        s["grad_ops"] += 1
                        break
    return None


def _fn_entry(mode, func, result, args, *, _s=None):
    """What the function observer reports: the torch function called (`result` None), or a tensor made
    from Python or numpy data (`result`), which is then known; in a measured call, numpy data counts as
    work the op counter cannot see."""
    s = _s
    if s["busy"] or (result is None and not s["counting"]):      # nothing to record
        return
    if mode is not s["fn_mode"] or not _off_stack(mode, s, "function"):
        return _tamper(s, "the grader's function observer was called by student code", s["getframe"](1))
    if result is not None:
        with s["no_tf"]():
            for t in _tensors(result, [], s):
                _vouch(t, s)
        if s["counting"] and (s["made_names"].get(func) in ("from_numpy", "frombuffer")
                              or any(issubclass(type(a), s["ndarray"]) for a in args or ())):
            s["outside"] += 1
    elif s["counting"]:
        try:
            name = s["fn_names"].get(func)
        except Exception:
            name = None
        if name is None:
            try:
                name = s["name_of"].get(type(func), _no_name)(func)
            except Exception:
                name = None
        if type(name) is str:
            s["functions"].add(name)
            if name in _DATA_OUT:             # a tensor's data taken out of torch: work on it is not counted
                s["outside"] += 1
    return None


def _no_name(func):
    return None


def _course_event(event, args, frame, s):
    """Events the grader's own code sends. Each is accepted only from the code allowed to send it."""
    if event == "course.gate":
        return _gate(args, frame, s)
    code = frame.f_code
    if event == "course.event":
        if code not in s["models"]:
            return _tamper(s, "student code sent an event as the grader's model", frame)
        if s["recording"]:
            with s["no_tf"]():
                s["events"].append((_pack(args[0], s), s["flops"]))
        return None
    if code not in s["worker"]:
        return _tamper(s, f"student code sent {event}", frame)
    if event == "course.begin":
        s.update(recording=True, counting=False, ops={}, op_count=0, flops=0, grad_ops=0, outside=0, events=[],
                 unobserved=[], functions=set())
        _check_glue(s, frame)
    elif event == "course.measure":
        s["counting"] = bool(args[0])
    elif event == "course.end":
        s.update(recording=False, counting=False)
        _check_glue(s, frame)
    elif event == "course.seal":
        args[1].append(_seal(s, args[0]))
    elif event == "course.admit":
        with s["no_tf"]():
            for t in _tensors(args[0], [], s, 12):
                _vouch(t, s)
    elif event == "course.check":
        with s["no_tf"]():
            for t in _tensors(args[0], [], s):
                if not _known(t, s):
                    _unobserved(s, "a tensor your code returned")
    elif event == "course.trust":        # the grader's code sent to the worker: recipes, stand-ins, models
        kind, codes, functions = args
        s["library"].update(codes)
        if kind == "model":
            s["models"].update(codes)
        s["guarded"].update(id(f) for f in functions)
        s["keep"].extend(functions)
    elif event == "course.arm":
        s["student_dirs"] = tuple(args[0])
        s["loaded"] = frozenset(s["modules"])
        s["glue"] = _glue_snapshot(s)
        s["armed"] = True
    elif event == "course.prune":
        _prune(s)
    return None


def _gate(args, frame, s):
    name, a, kw, holder = args
    entry = s["wires"].get(name)
    caller = frame.f_back
    if frame.f_code is not s["wire_code"] or entry is None or caller is None:
        return _tamper(s, f"student code called the guard of {name}", frame)
    original, aliases, short = entry
    code = caller.f_code
    if short in _LOADERS:
        if s["armed"] and _reloads(a, s):
            return _tamper(s, f"student code loaded an already loaded module again (_imp.{short})", caller)
    elif s["armed"] and not _torch_names(code, aliases, s):
        return _tamper(s, f"student code used torch's {name}", caller)
    s["busy"] = False                      # the original may itself call guarded APIs of torch's
    try:
        holder.extend((False, original(*a, **kw)))
    except BaseException as e:
        holder[:] = [True, e.with_traceback(None)]
    return None


def _torch_names(code, aliases, s):
    """Is `code` torch's own (by its file: code compiled under another file's name is tamper evidence) and
    does it name this API? Only such code may call it: a student's code, and torch code that does not
    name it (a higher-order helper handed the API as an argument), may not."""
    if not code.co_filename.startswith(s["torch_dir"]):
        return False
    names = code.co_names
    for n in aliases:
        if n in names:
            return True
    return False


def _reloads(a, s):
    """Would this _imp call load a module anew that is loaded already (a fresh copy of its functions,
    e.g. torch._C's without tripwires), or ctypes?"""
    target = a[0] if a else None
    if type(target) is s["ModuleSpec"]:
        name = s["vars"](target).get("name")
    elif type(target) is s["ModuleType"]:
        name = s["vars"](target).get("__name__")
    else:
        return True
    return type(name) is not str or name in s["loaded"] or name in ("ctypes", "_ctypes")


def _glue_snapshot(s):
    snap = {}
    for mod_name, mod in list(s["modules"].items()):
        if not mod_name.startswith("torch") or type(mod) is not s["ModuleType"]:
            continue
        d = s["vars"](mod)
        names = list(d) if mod_name in _GLUE_MODULES else [n for n in _GLUE_NAMES if n in d]
        for n in names:
            snap[(mod_name, n)] = id(d[n])
    return snap


def _check_glue(s, frame):
    if not s["armed"]:
        return None
    for (where, n), ident in s["glue"].items():
        mod = s["modules"].get(where)
        if type(mod) is not s["ModuleType"] or id(s["vars"](mod).get(n)) != ident:
            return _tamper(s, f"student code replaced torch's dispatch machinery ({where}.{n})", frame)
    for cls, snap in s["glue_classes"]:
        d = s["vars"](cls)
        if len(d) != len(snap) or any(id(d.get(k)) != v for k, v in snap.items()):
            return _tamper(s, f"student code changed torch's {cls.__qualname__}", frame)
    return None


def _watch(event, args, frame, s):
    """Standard audit events, once student code may be running."""
    if event == "object.__getattr__" or event == "object.__setattr__":
        obj, attr = args[0], args[1]
        if attr in _CODE_ATTRS and id(obj) in s["guarded"] and _code_owner(frame, s) != "grader":
            return _tamper(s, f"student code asked for {attr} of the grader's code", frame)
        if event == "object.__getattr__" and attr in _FRAME_ATTRS and _student_asked(frame, s):
            return _tamper(s, f"student code asked for a stack frame ({attr})", frame)
        return None
    if event == "sys._getframe":
        if _student_asked(frame, s):
            return _tamper(s, "student code asked for a stack frame (sys._getframe or inspect)", frame)
        return None
    if event == "import":
        name = args[0]
        if type(name) is str and (name in ("ctypes", "_ctypes") or name.startswith("ctypes.")):
            return _tamper(s, "student code imported ctypes", frame)
        return None
    if event == "open":
        path = args[0]
        if type(path) is bytes:
            path = path.decode("utf-8", "replace")
        if type(path) is str and (path.rstrip("/").rsplit("/", 1)[-1] == "mem" or "map_files" in path):
            return _tamper(s, "student code opened process memory", frame)
        return None
    if event == "compile" or event == "code.__new__":
        name = args[1]
        if type(name) is bytes:
            name = name.decode("utf-8", "replace")
        if (type(name) is str and name[:1] == "/" and not name.startswith(s["student_dirs"])
                and _code_owner(frame, s) == "student"):
            return _tamper(s, "student code compiled code under another file's name", frame)
        return None
    if event == "function.__new__" or event == "marshal.loads":
        if _code_owner(frame, s) == "student":
            return _tamper(s, f"student code built code objects ({event})", frame)
        return None
    if _code_owner(frame, s) != "grader":      # gc walks, tracing, audit hooks, other threads' frames, ctypes
        return _tamper(s, f"student code used {event}", frame)
    return None


def _hook(event, args, *, _s=None, _getframe=None, _watch_set=None):
    s = _s
    if s["busy"]:
        return
    course = event[:7] == "course."
    if not course and not (s["armed"] and (event in _watch_set or event[:7] == "ctypes.")):
        return
    s["busy"] = True
    try:
        frame = _getframe(1)
        if course:
            _course_event(event, args, frame, s)
        else:
            _watch(event, args, frame, s)
    finally:
        s["busy"] = False


# ---- installation (in the fork server, once) --------------------------------------------------------

def _rebind(fn, namespace, kwdefaults=None):
    """`fn` with `namespace` as its globals (same code) and these keyword defaults."""
    new = type(fn)(fn.__code__, namespace, fn.__name__, fn.__defaults__, None)
    new.__kwdefaults__ = kwdefaults if kwdefaults is not None else fn.__kwdefaults__
    new.__qualname__ = fn.__name__
    return new


def _made_from_data(torch, TorchFunctionMode):
    """{function as a TorchFunctionMode receives it: name} for torch's ways to make a tensor from Python or
    numpy data (what a mode receives is not always the object in torch's namespace)."""
    import numpy
    seen = []

    class Probe(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    calls = {"from_numpy": lambda: torch.from_numpy(numpy.ones(1)), "as_tensor": lambda: torch.as_tensor([1.0]),
             "asarray": lambda: torch.asarray([1.0]), "tensor": lambda: torch.tensor([1.0]),
             "frombuffer": lambda: torch.frombuffer(bytearray(8), dtype=torch.float32)}
    made = {getattr(torch, n): n for n in _MADE_FROM_DATA if hasattr(torch, n)}
    for name, call in calls.items():
        seen.clear()
        with Probe():
            call()
        for func in seen:
            if getattr(func, "__name__", None) == name:
                made[func] = name
    return made


def _hashable_names(namespace):
    """{function: name} for the callables of a namespace that can be dictionary keys."""
    out = {}
    for k, v in namespace.items():
        if callable(v):
            try:
                out[v] = k
            except TypeError:
                pass
    return out


def _sealed_class(name, base, method_name, method):
    """A subclass of torch's mode `base` holding every attribute of its bases itself, so that nothing
    student code sets on torch's classes is ever looked up on the grader's observers."""
    attrs = {}
    for klass in reversed(base.__mro__[:-1]):
        attrs.update({k: v for k, v in vars(klass).items() if k not in ("__dict__", "__weakref__")})
    attrs.update({method_name: method, "__init__": lambda self: None, "__qualname__": name,
                  "__module__": "torch.overrides"})
    cls = type(name, (base,), attrs)
    # torch's __init_subclass__ wraps a dispatch handler so that dynamo skips it (importing dynamo, a second
    # each, on the first op, and adding a Python call to every op): the grader's is never compiled.
    type.__setattr__(cls, method_name, method)
    return cls


def install(modules):
    """Build the ledger, hook, observers and tripwires (in the fork server, before any student code).
    Returns the ledger; each worker calls `start` on it, then arms it."""
    import os
    import types
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    TC = torch._C
    private = {"__builtins__": dict(vars(_builtins)), "__name__": "course_guard",
               "_hashlib": _hashlib, "_marshal": _marshal}
    # No name is looked up in it (everything comes from keyword defaults); C code that imports needs builtins.
    exposed = {"__builtins__": _builtins.__dict__, "__name__": "torch"}
    g = globals()
    for name in ("_WATCH", "_FRAME_ATTRS", "_CODE_ATTRS", "_STACK_APIS", "_STACK_LIBS", "VIEW_OPS",
                 "_FROM_DATA_OPS", "_GLUE_MODULES", "_GLUE_NAMES", "EXIT_TAMPER", "_LOADERS", "_MATMULS",
                 "_DATA_OUT"):
        private[name] = g[name]
    for name in ("_tensors", "_pack", "_mm_flops", "_code_owner", "_student_asked", "_where", "_tamper", "_seal",
                 "_storage", "_key", "_known", "_vouch", "_prune", "_unobserved", "_off_stack", "_no_name",
                 "_course_event", "_gate", "_torch_names", "_reloads", "_glue_snapshot", "_check_glue", "_watch"):
        private[name] = _rebind(g[name], private)

    # What must be found before anything is replaced.
    protected = {}
    for name in _C_TRIPWIRES:
        if hasattr(TC, name):
            protected[("torch._C", name)] = getattr(TC, name)
    for mod_name, names in _PY_TRIPWIRES.items():
        mod = __import__(mod_name, fromlist=["_"])
        for name in names:
            if hasattr(mod, name):
                protected[(mod_name, name)] = getattr(mod, name)
    import _imp
    import importlib.machinery
    for name in _LOADERS:
        protected[("_imp", name)] = getattr(_imp, name)
    op_names = {}
    for full in TC._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        base, _, overload = rest.partition(".")
        try:
            op = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
            shared = [r.alias_info for r in op._schema.returns if r.alias_info is not None]
            kind = "new" if not shared else ("inplace" if any(a.is_write for a in shared) else "view")
            op_names[op] = (base, op, op.__dict__.get("_op"), kind)
        except Exception:
            pass
    made = _made_from_data(torch, TorchFunctionMode)

    wire_code = _rebind(_tripwire, exposed).__code__
    fn_method = _rebind(_fn_observe, exposed, {"_report": None, "_made": made})
    op_method = _rebind(_op_observe, exposed, {"_report": None,
                                               "_kernels": {op: real for op, (_, _, real, _) in op_names.items()
                                                            if real is not None}})
    fn_mode = _sealed_class("TorchFunctionMode", TorchFunctionMode, "__torch_function__", fn_method)()
    op_mode = _sealed_class("TorchDispatchMode", TorchDispatchMode, "__torch_dispatch__", op_method)()
    s = {
        "busy": False, "armed": False, "recording": False, "counting": False, "key": b"", "seq": 0, "fd": -1,
        "write": os.write, "exit": os._exit, "modules": modules, "student_dirs": ("/nonexistent/",),
        "torch_dir": os.path.dirname(torch.__file__) + "/",
        "functions": set(), "ops": {}, "op_count": 0, "flops": 0, "grad_ops": 0, "outside": 0, "events": [],
        "unobserved": [], "tamper": [], "grad_on": TC.is_grad_enabled,
        "requires_grad": TC.TensorBase.__dict__["requires_grad"].__get__,
        "ndarray": __import__("numpy").ndarray,
        "known": {}, "library": set(), "models": set(), "worker": set(), "guarded": set(), "keep": [],
        "wires": {}, "wire_fns": {}, "wire_code": wire_code, "op_names": op_names,
        "fn_names": _hashable_names(vars(torch)), "made_names": made,
        "fn_mode": fn_mode, "op_mode": op_mode, "fn_code": fn_method.__code__, "op_code": op_method.__code__,
        "getframe": _sys._getframe,
        "name_of": {t: t.__dict__["__name__"].__get__ for t in (types.FunctionType, types.BuiltinFunctionType,
                                                                types.MethodDescriptorType, types.WrapperDescriptorType,
                                                                types.MethodWrapperType, types.ClassMethodDescriptorType)},
        "Tensor": torch.Tensor, "size": TC.TensorBase.size, "ModuleType": types.ModuleType, "vars": vars,
        "ModuleSpec": importlib.machinery.ModuleSpec, "loaded": frozenset(),
        "contiguous": TC.TensorBase.contiguous, "detach": TC.TensorBase.detach, "numpy": TC.TensorBase.numpy,
        "dtype": TC.TensorBase.__dict__["dtype"].__get__, "type_name": type.__dict__["__name__"].__get__,
        "untyped_storage": TC.TensorBase.untyped_storage, "cdata": TC.StorageBase.__dict__["_cdata"].__get__,
        "weak_ref": TC.StorageBase._weak_ref, "expired": TC.StorageBase._expired,
        "free": TC.StorageBase._free_weak_ref,
        "no_tf": TC.DisableTorchFunction,
        "len_dispatch": TC._len_torch_dispatch_stack, "at_dispatch": TC._get_dispatch_stack_at,
        "len_function": TC._len_torch_function_stack, "at_function": TC._get_function_stack_at,
        "glue_classes": [], "glue": {},
    }
    s["guarded"].update({id(fn_method), id(op_method)})
    s["library"].update({fn_method.__code__, op_method.__code__, wire_code})   # frames of ours, not the student's
    s["keep"] += [fn_method, op_method]

    # Tripwires, in every module that holds one of the originals.
    for key, original in protected.items():
        name = f"{key[0]}.{key[1]}"
        w = types.FunctionType(wire_code, exposed, key[1], None, None)
        w.__kwdefaults__ = {"_name": name, "_audit": _sys.audit}
        w.__qualname__ = key[1]
        s["wires"][name] = (original, frozenset({key[1]}), key[1])   # extend adds the names torch knows it by
        s["wire_fns"][name] = w
        s["guarded"].add(id(w))
        s["keep"].append(w)
    extend(s, modules)
    glue_classes = (TorchDispatchMode, TorchFunctionMode, torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    s["glue_classes"] = [(c, {k: id(v) for k, v in vars(c).items()}) for c in glue_classes]

    fn_method.__kwdefaults__["_report"] = _rebind(_fn_entry, private, {"_s": s})
    op_method.__kwdefaults__["_report"] = _rebind(_op_entry, private, {"_s": s})
    hook = _rebind(_hook, private, {"_s": s, "_getframe": _sys._getframe, "_watch_set": _WATCH})
    _sys.addaudithook(hook)
    # The observers stay on their stacks for the worker's whole life, pushed with the originals.
    TC._push_on_torch_function_stack(fn_mode)
    TC._push_on_torch_dispatch_stack(op_mode)
    return s


def extend(s, modules):
    """Put each tripwire wherever a module holds its original (at install, and again when the fork server has
    imported more of torch), adding the names torch's modules know the original by."""
    import types
    by_id = {id(original): name for name, (original, _, _) in s["wires"].items()}
    for mod_name, mod in list(modules.items()):
        d = getattr(mod, "__dict__", None) if isinstance(mod, types.ModuleType) else None
        if type(d) is not dict:
            continue
        for n, v in list(d.items()):
            name = by_id.get(id(v))
            if name is not None and s["wires"][name][0] is v:
                original, aliases, short = s["wires"][name]
                if mod_name.startswith("torch") and type(mod).__name__ == "module":
                    s["wires"][name] = (original, aliases | {n}, short)
                d[n] = s["wire_fns"][name]


def start(s, key, fd, worker_functions):
    """In a freshly forked worker, before arming: its own key and reply fd, and the worker's own code."""
    s["key"], s["fd"] = bytes(key), fd
    s["seq"] = 0
    for f in worker_functions:
        s["worker"].add(f.__code__)
        s["guarded"].add(id(f))
        s["keep"].append(f)
