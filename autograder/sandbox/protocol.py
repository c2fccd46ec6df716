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

import torch

MAX_FRAME = 512 * 1024 * 1024
MAC_BYTES = 32
TENSOR = "__tensor__"
_DTYPES = {str(d).replace("torch.", ""): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                                     torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                                     torch.bool, torch.complex64, torch.complex128)}
_AS_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


class ForgedReply(Exception):
    """A reply whose seal does not check out: something other than the worker's guard wrote it."""


def _pack(x):
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        raw = _AS_INT.get(t.dtype)
        data = (t.view(raw) if raw else t).numpy().tobytes()
        return (TENSOR, str(t.dtype).replace("torch.", ""), tuple(t.shape), data)
    if isinstance(x, (list, tuple)):
        return type(x)(_pack(v) for v in x)
    if isinstance(x, dict):
        return {k: _pack(v) for k, v in x.items()}
    return x


def _unpack(x):
    if type(x) is tuple and len(x) == 4 and x[0] == TENSOR and x[1] in _DTYPES:
        dtype = _DTYPES[x[1]]
        if not x[3]:
            return torch.empty(x[2], dtype=dtype)
        raw = _AS_INT.get(dtype)
        t = torch.frombuffer(bytearray(x[3]), dtype=raw or dtype).reshape(x[2])
        return t.view(dtype) if raw else t
    if type(x) in (list, tuple):
        return type(x)(_unpack(v) for v in x)
    if type(x) is dict:
        return {k: _unpack(v) for k, v in x.items()}
    return x


def encode(message: dict) -> bytes:
    """A request frame."""
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
