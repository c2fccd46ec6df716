"""The worker: the only process that runs student code.

Standalone source, never imported: the fork server runs guard.py's text followed by this file's, in a
fresh namespace, in a child it has confined (confine.py) and whose guard it has started (guard.start).
Nothing here is reachable from student code: no function of this file is ever handed to it, and the
reference wrappers and stand-ins it does hand over live in namespaces of their own.

Requests arrive on stdin and replies leave on a private copy of stdout, both as frames (protocol.py):
a request is `marshal` data with tensors as ("__tensor__", dtype, shape, bytes) tuples; a reply is
sealed by the guard, which adds its ledger. The student's own prints go to stderr, which the judge
drains. Requests are protocol.py's Import, Call, Module and Run (their fields are the keys read here);
each may carry "patches": stand-ins built from PyTorch's own modules that replace the student's
`module.name` for that request only. A Run's `source` defines `entry`, run under a neutral name.
Every student call runs inside a measured window of the guard (ops counted); everything else the
student's code does during a request is still observed (functions, provenance). Nothing of the
student's runs outside a request: replies are encoded inside the window, with captured C-level
functions only, so replacing torch.save, builtins or tensor methods changes nothing the judge receives.
"""


def worker_main(ledger, boot, _os, _sys, _marshal):
    """Everything the worker needs is captured here, before the student's code can replace any of it."""
    import gc
    import importlib
    import types
    import torch

    TB = torch._C.TensorBase
    audit = _sys.audit
    reply_fd = boot["reply_fd"]
    write = _os.write
    folders = boot["folders"]
    Tensor, Module, Parameter = torch.Tensor, torch.nn.Module, torch.nn.Parameter
    no_tf = ledger["no_tf"]           # the original (torch._C's is a tripwire by now)
    set_grad = torch._C._set_grad_enabled
    is_grad = torch._C.is_grad_enabled
    seed_all = torch._C.default_generator.manual_seed
    frombuffer, empty = torch.frombuffer, torch.empty
    detach, contiguous, numpy_of, as_subclass = TB.detach, TB.contiguous, TB.numpy, TB.as_subclass
    view_dtype, size_of, dtype_of = TB.view, TB.size, TB.__dict__["dtype"].__get__
    requires_grad_, numel = TB.requires_grad_, TB.numel
    clone = TB.clone
    getattribute = object.__getattribute__
    type_name = type.__dict__["__name__"].__get__
    dtypes = {str(d).replace("torch.", ""): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                                         torch.int64, torch.int32, torch.int16, torch.int8,
                                                         torch.uint8, torch.bool, torch.complex64, torch.complex128)}
    same_size_int = {torch.bfloat16: torch.int16, torch.float16: torch.int16}
    read = _sys.stdin.buffer.raw.read if hasattr(_sys.stdin.buffer, "raw") else _sys.stdin.buffer.read
    traceback_extract = __import__("traceback").extract_tb
    realpath = _os.path.realpath
    basename = _os.path.basename
    reference_files = set()
    originals = {}                # (module, name) -> the student's own object while a stand-in replaces it
    stand_in_cache = {}

    # ---- frames -------------------------------------------------------------------------------
    def read_exact(n):
        data = b""
        while len(data) < n:
            chunk = read(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def send(payload):
        holder = []
        audit("course.seal", _marshal.dumps(payload), holder)
        frame = holder[0]
        while frame:
            frame = frame[write(reply_fd, frame):]

    # ---- values in and out --------------------------------------------------------------------
    def decode(x):
        t = type(x)
        if t is tuple and len(x) == 4 and x[0] == "__tensor__":
            dtype, shape = dtypes[x[1]], x[2]
            if not x[3]:
                return empty(shape, dtype=dtype)
            raw = same_size_int.get(dtype)
            data = frombuffer(bytearray(x[3]), dtype=raw or dtype).reshape(shape)
            return view_dtype(data, dtype) if raw else data
        if t is list or t is tuple:
            return t(decode(v) for v in x)
        if t is dict:
            return {k: decode(v) for k, v in x.items()}
        return x

    def encode_tensor(x):
        with no_tf():
            t = as_subclass(detach(x), Tensor)
            dtype = dtype_of(t)
            name = str(dtype).replace("torch.", "")
            if t.device.type == "meta":
                return {"__object__": "Tensor on meta", "repr": "", "shape": tuple(size_of(t))}
            if t.device.type != "cpu" or name not in dtypes:
                return {"__object__": f"Tensor ({name} on {t.device.type})", "repr": ""}
            raw = same_size_int.get(dtype)
            t = contiguous(view_dtype(t, raw) if raw else t)
            return ("__tensor__", name, tuple(size_of(t)), numpy_of(t).tobytes())

    def plain(x, depth=0, limit=3):
        """A student's value as tensors and plain values (never their objects)."""
        t = type(x)
        if issubclass(t, Tensor):
            return encode_tensor(x)
        if x is None or t in (bool, int, float, str):
            return x
        if depth < limit and (t is tuple or t is list):
            return t(plain(v, depth + 1, limit) for v in x)
        if depth < limit and t is dict and all(type(k) is str for k in x):
            # wrapped, so a student's dict can never pose as one of the worker's own markers
            return {"__dict__": {k: plain(v, depth + 1, limit) for k, v in x.items()}}
        try:
            text = repr(x)
            text = text[:200] if type(text) is str else "<unprintable>"
        except Exception:
            text = "<unprintable>"
        return {"__object__": type_name(t), "repr": text}

    def tensors_in(x, into):
        t = type(x)
        if issubclass(t, Tensor):
            into.append(x)
        elif t is tuple or t is list:
            for v in x:
                tensors_in(v, into)
        elif t is dict:
            for v in x.values():
                tensors_in(v, into)
        return into

    # ---- errors -------------------------------------------------------------------------------
    def student_frames(tb):
        """The traceback lines in the student's files (never the worker's, a recipe's or the course's)."""
        lines = []
        try:
            frames = [f for f in traceback_extract(tb) if not f.filename.startswith("<")
                      and realpath(f.filename).startswith(tuple(folders))
                      and realpath(f.filename) not in reference_files]
        except Exception:
            return ""
        for f in frames[-6:]:
            lines.append(f'  File "{basename(f.filename)}", line {f.lineno}, in {f.name}')
            if f.line:
                lines.append(f"    {f.line}")
        return "\n".join(lines)

    def error(kind, exc):
        try:
            message = str(exc)
        except Exception:
            message = "<the exception's message could not be read>"
        if type(message) is not str:
            message = "<the exception's message could not be read>"
        if len(message) > 500:
            message = message[:500] + "..."
        inside = getattr(exc, "_course_call", None)
        inside = inside if type(inside) is dict and all(type(v) is str for v in inside.values()) else None
        return {"ok": False, "kind": kind, "type": type_name(type(exc)), "message": message,
                "traceback": student_frames(exc.__traceback__), "inside": inside}

    # ---- the measured window --------------------------------------------------------------------
    def measured(fn, *args, **kwargs):
        audit("course.measure", True)
        try:
            return fn(*args, **kwargs)
        finally:
            audit("course.measure", False)

    def load(name):
        return importlib.import_module(name)

    def target(module, name):
        """What a request calls directly: always the student's own object, never a stand-in."""
        key = (module.__name__, name)
        return originals[key] if key in originals else getattr(module, name, None)

    # ---- stand-ins and recipes: the grader's code, trusted by identity ------------------------------
    def compile_trusted(source, kind, entry=None):
        """Run the grader's `source` in a namespace of its own; return the namespace. Its functions are
        registered with the guard (their code may send events; nobody may read it)."""
        namespace = {"__name__": "course_" + kind, "__builtins__": __builtins__}
        code = compile(source, "<course>", "exec")
        exec(code, namespace)
        codes, functions = [], []
        collect_code(code, codes)
        for value in list(namespace.values()):
            for f in functions_of(value):
                functions.append(f)
        audit("course.trust", kind, codes, functions)
        if entry is not None:        # nothing on the stack names the check: the entry always runs as `run`
            fn = namespace[entry]
            namespace[entry] = types.FunctionType(fn.__code__.replace(co_name="run", co_qualname="run"),
                                                  namespace, "run", fn.__defaults__, fn.__closure__)
            audit("course.trust", kind, [namespace[entry].__code__], [namespace[entry]])
        return namespace

    def collect_code(code, into):
        into.append(code)
        for c in code.co_consts:
            if type(c) is types.CodeType:
                collect_code(c, into)

    def functions_of(value):
        if type(value) is types.FunctionType:
            return [value]
        if isinstance(value, type):
            found = []
            for v in vars(value).values():
                if type(v) is types.FunctionType:
                    found.append(v)
                elif isinstance(v, (staticmethod, classmethod)) and type(v.__func__) is types.FunctionType:
                    found.append(v.__func__)
            return found
        return []

    class Patched:
        """Replace student callables by the judge's stand-ins for one request; put them back after."""

        def __init__(self, patches):
            self.patches, self.saved = patches or [], []

        def __enter__(self):
            for p in self.patches:
                module = load(p["module"])
                key = (p["source"], p["defines"])
                if key not in stand_in_cache:
                    namespace = compile_trusted("import math\nimport torch\nfrom torch import nn\n"
                                                "import torch.nn.functional as F\n" + p["source"], "stand_in")
                    obj = namespace[p["defines"]]
                    obj.__name__ = obj.__qualname__ = p["name"]     # it stands in under the student's name
                    stand_in_cache[key] = obj
                old = vars(module).get(p["name"], missing)
                self.saved.append((module, p["name"], old))
                originals[(module.__name__, p["name"])] = None if old is missing else old
                setattr(module, p["name"], stand_in_cache[key])
            return self

        def __exit__(self, *exc):
            for module, name, old in reversed(self.saved):
                originals.pop((module.__name__, name), None)
                if old is missing:
                    vars(module).pop(name, None)
                else:
                    setattr(module, name, old)
            return False

    missing = object()

    # ---- reference modules: errors inside them are reported at the student's call ------------------
    wrapper_code = compile(
        "def wrapped(*args, _fn=None, _where=None, _names=None, _describe=None, **kwargs):\n"
        "    try:\n"
        "        return _fn(*args, **kwargs)\n"
        "    except Exception as e:\n"
        "        given = [n + ' ' + _describe(a) for n, a in zip(_names, args) if n != 'self']\n"
        "        given += [k + '=' + _describe(v) for k, v in kwargs.items()]\n"
        "        e._course_call = {'where': _where, 'args': ', '.join(given) or 'no arguments'}\n"
        "        raise\n", "<course>", "exec").co_consts
    wrapper_code = next(c for c in wrapper_code if type(c) is types.CodeType)
    wrapper_globals = {"__builtins__": {"zip": zip, "Exception": Exception}}

    def describe_arg(x):
        if issubclass(type(x), Tensor):
            with no_tf():
                return f"[{', '.join(map(str, size_of(x)))}] {str(dtype_of(x)).replace('torch.', '')}"
        if x is None or type(x) in (bool, int, float, str):
            return repr(x)[:40]
        return type_name(type(x))

    def wrap(fn, where, names):
        """A wrapper handed to student code: guarded, so its keyword defaults (the worker's describe_arg)
        cannot be read."""
        w = types.FunctionType(wrapper_code, wrapper_globals, getattr(fn, "__name__", "wrapped"))
        w.__kwdefaults__ = {"_fn": fn, "_where": where, "_names": names, "_describe": describe_arg}
        w.__wrapped__, w.__doc__ = fn, getattr(fn, "__doc__", None)
        audit("course.trust", "reference", [wrapper_code], [w])
        return w

    def wrap_reference(module):
        import inspect
        reference_files.add(realpath(module.__file__))
        file = basename(module.__file__)
        for name, obj in list(vars(module).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                setattr(module, name, wrap(obj, f"`{name}` ({file})", list(inspect.signature(obj).parameters)))
            elif isinstance(obj, type) and issubclass(obj, Module) and "forward" in vars(obj):
                w = wrap(obj.forward, f"`{name}.forward` ({file})", list(inspect.signature(obj.forward).parameters))
                w.__qualname__ = f"{name}.forward"
                obj.forward = w

    # ---- the structure of a module, read from nn.Module's own dictionaries ------------------------
    def own(m, field):
        d = getattribute(m, field)
        return d if type(d) is dict else {}

    def walk(obj):
        """(name, module) for every submodule reference, duplicates included, in registration order."""
        out, todo = [("", obj)], [("", obj)]
        seen = 0
        while todo and seen < 10000:
            prefix, m = todo.pop(0)
            seen += 1
            for k, child in own(m, "_modules").items():
                if isinstance(child, Module):
                    name = f"{prefix}.{k}" if prefix else k
                    out.append((name, child))
                    todo.append((name, child))
        return out

    def structure(obj):
        mods = walk(obj)
        params = [(f"{n}.{k}" if n else k, p) for n, m in mods for k, p in own(m, "_parameters").items()
                  if p is not None]
        buffers = [(f"{n}.{k}" if n else k, b) for n, m in mods for k, b in own(m, "_buffers").items()
                   if b is not None]
        unique, seen_ids = {}, set()
        for name, p in params:
            if id(p) not in seen_ids:
                seen_ids.add(id(p))
                unique[name] = p
        groups = {}
        for name, p in params:
            groups.setdefault(id(p), []).append(name)
        first_name = {}
        for name, m in mods:
            first_name.setdefault(id(m), name)
        shared = sorted(name for name, m in mods if name and first_name[id(m)] != name)
        shared = [k for k in shared if not any(k.startswith(o + ".") for o in shared)]
        # each later name -> the name the same module object was first reached by (a second name is not sharing)
        mod_of = dict(mods)
        shared_with = {k: first_name[id(mod_of[k])] for k in shared}
        return {"mods": mods, "params": unique, "tied": [g for g in groups.values() if len(g) > 1],
                "buffers": dict(buffers), "shared": shared, "shared_with": shared_with}

    # ---- operations -----------------------------------------------------------------------------
    def op_import(req):
        for name in req.get("references", []):
            try:
                wrap_reference(load(name))
            except BaseException as e:
                return error("import", e)
        for name in req.get("modules", []):
            try:
                load(name)
            except BaseException as e:
                return error("import", e)
        return {"ok": True}

    def op_call(req):
        try:
            module = load(req["module"])
        except BaseException as e:
            return error("import", e)
        func = target(module, req["func"])
        if not callable(func):
            return {"ok": False, "kind": "missing", "type": "AttributeError",
                    "message": f"{req['module']}.py has no function {req['func']}", "traceback": ""}
        args = list(req.get("args", []))
        seed_all(req.get("seed", 0))
        was = is_grad()
        set_grad(bool(req.get("grad_args")))
        leaves, args = at_leaves(args, set(req.get("grad_args") or []))
        try:
            result = measured(func, *args, **dict(req.get("kwargs", {})))
        except NotImplementedError as e:
            return error("not_implemented", e)
        except Exception as e:
            return error("exception", e)
        finally:
            set_grad(was)
        audit("course.check", result)
        reply = {"ok": True, "value": plain(result)}
        if req.get("backward") is not None:
            try:
                ran, why = backward(tensors_in(result, []), req["backward"])
            except Exception as e:
                return error("exception", e)
            reply["grads"] = [plain(leaves[i].grad) for i in req.get("grad_args") or []] if ran else None
            reply["grad_problem"] = why
        if req.get("return_args"):
            reply["args_after"] = [plain(a) for a in args]
        return reply

    def at_leaves(args, which):
        """(leaves, copies) of `args`: the input gradients are taken at the leaves (args[i] for i in `which`), which
        the student's code never sees; it gets the copies, so changing an input in place costs points once (in
        the inputs-unchanged check), not again as a leaf-view error. Call it with grad mode on."""
        leaves = [requires_grad_(clone(a), True) if i in which else a for i, a in enumerate(args)]
        return leaves, [clone(a) if i in which else a for i, a in enumerate(leaves)]

    def backward(outputs, grads):
        """Backpropagate `grads` (one per output tensor, None to skip). Returns (ran, message)."""
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        for o, g in pairs:
            if not o.requires_grad:
                return False, "the output is not connected to the inputs' autograd graph (no grad_fn)"
            if tuple(o.shape) != tuple(g.shape):
                return False, f"output shape {tuple(o.shape)} cannot take a gradient of shape {tuple(g.shape)}"
        torch.autograd.backward([o for o, _ in pairs], [g.to(o.dtype) for o, g in pairs])
        return True, ""

    def build(req, module):
        cls = target(module, req["cls"])
        if not isinstance(cls, type):
            return None, {"ok": False, "kind": "missing", "type": "AttributeError",
                          "message": f"{req['module']}.py has no class {req['cls']}", "traceback": ""}
        seed_all(req.get("seed", 0))
        args, kwargs = req.get("args", []), req.get("kwargs", {})
        try:
            obj = None
            if req.get("device") == "meta":      # sizes only: no memory, no time (else fall back to the CPU)
                try:
                    with torch.device("meta"):
                        obj = cls(*args, **kwargs)
                except NotImplementedError:
                    raise
                except Exception:
                    obj = None
            if obj is None:
                obj = cls(*args, **kwargs)
        except NotImplementedError as e:
            return None, error("not_implemented", e)
        except Exception as e:
            return None, error("constructor", e)
        if not isinstance(obj, Module):
            return None, {"ok": False, "kind": "exception", "type": "TypeError",
                          "message": f"{req['cls']} is not a torch.nn.Module", "traceback": ""}
        return obj, None

    def load_tensors(req, st, field, given, kind):
        """Copy the judge's `given` {name: tensor} into the module's own parameters or buffers."""
        have = st["params"] if field == "params" else st["buffers"]
        if field == "params":
            missing_ = [k for k in given if k not in have]
            reused = sorted({m for m in st["shared"] for k in missing_ if k.startswith(m + ".")})
            if reused:
                return {"ok": False, "kind": "shared", "type": "AttributeError",
                        "message": f"{req['cls']}.{reused[0]} is the same module object as another submodule, "
                                   f"so it has no weights of its own", "traceback": ""}
        absent = [k for k in given if k not in have]
        if absent:
            return {"ok": False, "kind": "params", "type": "AttributeError",
                    "message": f"{req['cls']} has no {kind}(s) {', '.join(absent)}", "traceback": ""}
        with torch.no_grad():
            for k, v in given.items():
                if tuple(have[k].shape) != tuple(v.shape):
                    return {"ok": False, "kind": "exception", "type": "ValueError",
                            "message": f"{kind} {k} has shape {tuple(have[k].shape)}, expected {tuple(v.shape)}",
                            "traceback": ""}
                have[k].copy_(v)
        return None

    def run_calls(req, obj):
        """Run `calls` on the module; (outputs, attrs, attrs_require_grad, args_after, the last call's
        arguments as gradient leaves)."""
        outputs, attrs, attrs_grad, args_after, leaves = [], [], [], [], []
        want_grad = req.get("backward") is not None
        for call in req.get("calls", []):
            seed_all(call.get("seed", req.get("seed", 0)))
            given = list(call.get("args", []))
            method = getattr(obj, call["method"]) if call.get("method") else obj
            was = is_grad()
            set_grad(want_grad)        # before the copies: they must stay connected to the leaves
            # input gradients too (e.g. does the key input get one?), at leaves as in op_call
            leaves, args = at_leaves(given, {i for i, a in enumerate(given) if want_grad and issubclass(type(a), Tensor)
                                             and a.is_floating_point()})
            try:
                out = measured(method, *args, **call.get("kwargs", {}))
            finally:
                set_grad(was)
            outputs.append(out)
            values = {a: dotted(obj, a) for a in req.get("attrs", [])}
            attrs.append({a: plain(v) for a, v in values.items()})
            attrs_grad.append({a: issubclass(type(v), Tensor) and bool(v.requires_grad) for a, v in values.items()})
            args_after.append([plain(a) for a in args])
        return outputs, attrs, attrs_grad, args_after, leaves

    def dotted(obj, name):
        for part in name.split("."):
            obj = getattr(obj, part, None)
        return obj

    def shape_of(obj, st, values):
        """What the judge reads of a built module: parameters (values or sizes), their count, tying, submodules."""
        return {"ok": True,
                "params": {k: plain(v) if values else list(size_of(v)) for k, v in st["params"].items()},
                "param_count": sum(numel(v) for v in st["params"].values()),
                "tied": st["tied"],
                "submodules": sorted({f"nn.{type_name(type(m))}" for _, m in st["mods"]
                                      if type(m).__module__.startswith("torch.")}),
                "children": {k: type_name(type(m)) for k, m in st["mods"] if k},
                "shared": st["shared"], "shared_with": st["shared_with"]}

    def load_given(req, obj):
        """The request's dtype, then its parameters and buffers, into the module; an error reply, or None."""
        st = structure(obj)
        if req.get("dtype") == "float64":
            obj.double()
            st = structure(obj)
        for field, kind in (("params", "parameter"), ("buffers_in", "buffer")):
            given = req.get(field) or {}
            if given:
                problem = load_tensors(req, st, "params" if field == "params" else "buffers", given, kind)
                if problem:
                    return problem
        return None

    def gradients(req, obj, outputs, args):
        """Backward from the last output with the judge's grad_output: parameter and input gradients."""
        ran, why = backward(tensors_in(outputs[-1], []), req["backward"])
        return {"grad_problem": why,
                "param_grads": {k: plain(p.grad) for k, p in structure(obj)["params"].items()} if ran else None,
                "input_grads": ([plain(a.grad) if issubclass(type(a), Tensor) else None for a in args]
                                if ran else None)}

    def op_module(req):
        """Build the student's module, describe it, load the judge's weights, run the calls (and backward)."""
        try:
            module = load(req["module"])
        except BaseException as e:
            return error("import", e)
        obj, problem = build(req, module)
        if problem:
            return problem
        reply = shape_of(obj, structure(obj), req.get("param_values", True))
        try:
            problem = load_given(req, obj)
            if problem:
                return problem
            buffers = structure(obj)["buffers"] if req.get("buffers") else None
            reply["buffers"] = {k: plain(v) for k, v in buffers.items()} if buffers is not None else None
            obj.train(bool(req.get("train", False)))
            outputs, attrs, attrs_grad, args_after, args = run_calls(req, obj)
            audit("course.check", outputs)
            reply.update(outputs=[plain(o) for o in outputs], attrs=attrs, attrs_require_grad=attrs_grad,
                         args_after=args_after)
            if req.get("backward") is not None and outputs:
                reply.update(gradients(req, obj, outputs, args))
        except NotImplementedError as e:
            return error("not_implemented", e)
        except Exception as e:
            return error("exception", e)
        return reply

    def op_run(req):
        """Run a judge recipe: `entry` of `source`, called with the request's arguments, all measured."""
        namespace = compile_trusted(req["source"], "model", entry=req["entry"])
        seed_all(req.get("seed", 0))
        try:
            result = measured(namespace[req["entry"]], *req.get("args", []), **req.get("kwargs", {}))
        except NotImplementedError as e:
            return error("not_implemented", e)
        except Exception as e:
            return error("exception", e)
        audit("course.check", result)
        return {"ok": True, "value": plain(result, limit=6)}

    ops = {"call": op_call, "module": op_module, "import": op_import, "run": op_run}

    def serve():
        gc.disable()      # a student's finalizer runs when its last reference goes (inside a request), never later
        send({"ok": True, "ready": True, "torch": str(torch.__version__)})
        while True:
            head = read_exact(4)
            if head is None:
                return
            body = read_exact(int.from_bytes(head, "big"))
            if body is None:
                return
            req = decode(_marshal.loads(body))
            audit("course.admit", req)
            audit("course.begin")
            try:
                with Patched(req.get("patches")):
                    reply = ops[req["op"]](req)
            except SystemExit as e:
                reply = {"ok": False, "kind": "exit", "type": "SystemExit",
                         "message": f"student code called sys.exit({e.code!r})"[:300],
                         "traceback": student_frames(e.__traceback__)}
            except BaseException as e:        # KeyboardInterrupt, RecursionError escaping, ...
                reply = error("exception", e)
            audit("course.end")
            send(reply)
            del req, reply
            audit("course.prune")

    return serve, [worker_main, read_exact, send, decode, encode_tensor, plain, tensors_in, student_frames, error,
                   measured, load, target, compile_trusted, collect_code, functions_of, Patched.__enter__,
                   Patched.__exit__, Patched.__init__, describe_arg, wrap, wrap_reference, own, walk, structure,
                   op_import, op_call, at_leaves, backward, build, load_tensors, run_calls, dotted, shape_of, load_given,
                   gradients, op_module, op_run, serve]
