"""Frames between judge and worker, and the check of the worker's seal.

A frame is a 4-byte big-endian length, then the body. Requests (judge -> worker) are `marshal` data:
plain values, with each tensor as ("__tensor__", dtype, shape, raw bytes). Replies (worker -> judge)
end with a 32-byte HMAC-SHA256 of (sequence number, body) made by the worker's guard with the key the
judge gave it; the body is (payload, ledger): the payload is the worker's reply in the same encoding,
the ledger what the guard observed. The judge unpacks a body only after its seal checks out, so what it
reads was produced by the guard's and the worker's own encoders (plain data only), never by student code.
"""
from __future__ import annotations

import hashlib
import hmac
import marshal
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any, ClassVar

MAX_FRAME = 512 * 1024 * 1024
MAC_BYTES = 32
TENSOR = "__tensor__"
_DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                "complex64", "complex128")


@cache
def _torch():
    """torch, imported at the first frame: a slot's fork server starts (and imports torch) while the judge
    imports it, instead of after."""
    import torch
    return torch


def _as_int(dtype):
    """The integer dtype a half-precision tensor travels as (numpy has no bfloat16)."""
    torch = _torch()
    return torch.int16 if dtype in (torch.bfloat16, torch.float16) else None


# ---- requests (judge -> worker): what worker.py's op_* functions read, one class per op ----------------

@dataclass
class Request:
    op: ClassVar[str]
    patches: list = field(default_factory=list)     # stand-ins: [{"module", "name", "source", "defines"}]

    def message(self) -> dict:
        return {"op": self.op, **asdict(self)}


@dataclass
class Import(Request):
    """Import the student's modules (and the course's reference modules, wrapped)."""
    op: ClassVar[str] = "import"
    modules: list = field(default_factory=list)
    references: list = field(default_factory=list)


@dataclass
class Invocation(Request):
    """What every request that runs code (Call, Module, Run) has: the `args` and `kwargs` it is run with, the
    `seed` set before, and `record`: send back what the guard recorded while it ran."""
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    record: bool = False
    seed: int = 0


@dataclass
class Call(Invocation):
    """Call `module.func(*args, **kwargs)`; `grad_args`: indices of args that require grad; `backward`: a
    grad_output for the result; `return_args`: send the arguments back (were they modified?)."""
    op: ClassVar[str] = "call"
    module: str = ""
    func: str = ""
    grad_args: list = field(default_factory=list)
    backward: Any = None
    return_args: bool = False


@dataclass
class Module(Invocation):
    """Build `module.cls(*args, **kwargs)`, load `params` (and `buffers_in`), set `train`, run `calls` (each
    {"args", "kwargs", "seed", "method"}), read `attrs` (dotted names) after each, backward from the last
    output with `backward`. `param_values=False`: parameter sizes only; `device="meta"`: built without memory
    (counting the parameters of big models); `buffers`: send the buffers back."""
    op: ClassVar[str] = "module"
    module: str = ""
    cls: str = ""
    params: dict | None = None
    buffers_in: dict | None = None
    dtype: str | None = None
    device: str | None = None
    train: bool = False
    calls: list = field(default_factory=list)
    attrs: list = field(default_factory=list)
    backward: Any = None
    buffers: bool = False
    param_values: bool = True


@dataclass
class Run(Invocation):
    """Run the judge's recipe `entry`, defined by `source`, beside the student's code."""
    op: ClassVar[str] = "run"
    source: str = ""
    entry: str = ""


class ForgedReply(Exception):
    """A reply whose seal does not check out: something other than the worker's guard wrote it."""


def _pack(x):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        raw = _as_int(t.dtype)
        data = (t.view(raw) if raw else t).numpy().tobytes()
        return (TENSOR, str(t.dtype).replace("torch.", ""), tuple(t.shape), data)
    if isinstance(x, (list, tuple)):
        return type(x)(_pack(v) for v in x)
    if isinstance(x, dict):
        return {k: _pack(v) for k, v in x.items()}
    return x


def _unpack(x):
    if type(x) is tuple and len(x) == 4 and x[0] == TENSOR and x[1] in _DTYPE_NAMES:
        torch = _torch()
        dtype = getattr(torch, x[1])
        if not x[3]:
            return torch.empty(x[2], dtype=dtype)
        raw = _as_int(dtype)
        t = torch.frombuffer(bytearray(x[3]), dtype=raw or dtype).reshape(x[2])
        return t.view(dtype) if raw else t
    if type(x) in (list, tuple):
        return type(x)(_unpack(v) for v in x)
    if type(x) is dict:
        return {k: _unpack(v) for k, v in x.items()}
    return x


def encode(message: "dict | Request") -> bytes:
    """A request frame."""
    if isinstance(message, Request):
        message = message.message()
    body = marshal.dumps(_pack(message))
    return len(body).to_bytes(4, "big") + body


def open_reply(body: bytes, key: bytes, seq: int) -> tuple[dict, dict]:
    """(payload, ledger) of a reply frame's body, after checking its seal."""
    if len(body) < MAC_BYTES:
        raise ForgedReply("a reply too short to carry the worker's seal")
    data, mac = body[:-MAC_BYTES], body[-MAC_BYTES:]
    want = hmac.digest(key, seq.to_bytes(8, "big") + data, hashlib.sha256)
    if not hmac.compare_digest(mac, want):
        raise ForgedReply("a reply without the worker's seal (written by something other than the grader)")
    payload, ledger = marshal.loads(data)
    return _unpack(marshal.loads(payload)), ledger
