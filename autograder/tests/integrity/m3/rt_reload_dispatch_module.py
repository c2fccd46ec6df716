"""ATTACK (written by the red team, outside the course team): At import, puts a finder on sys.meta_path and importlib.reload()s torch.utils._python_dispatch from its own file with _push_mode/_pop_mode replaced by no-ops: the grader's TorchDispatchMode (an instance of the old class, whose methods read the module's globals) is never pushed again. F.layer_norm (forbidden) runs inside DisableTorchFunction.

EXPECT: score_at_most=19

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: importlib.reload of torch.utils._python_dispatch
# 
# At import, puts a finder on sys.meta_path and importlib.reload()s torch.utils._python_dispatch from its own file with _push_mode/_pop_mode replaced by no-ops: the grader's TorchDispatchMode (an instance of the old class, whose methods read the module's globals) is never pushed again. F.layer_norm (forbidden) runs inside DisableTorchFunction.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 3: the building blocks of the encoder and the decoder.

A Transformer layer wraps each sub-layer (attention, feed-forward) in a residual connection and a
layer normalisation. You write LayerNorm and the position-wise FeedForward network, then put them
together with your MultiHeadAttention into an EncoderLayer and a DecoderLayer.

Two ways to place the normalisation, chosen by `norm_first` when a layer is built:
- Post-LN (norm_first=False, the original paper):  x = norm(x + drop(sublayer(x)))
- Pre-LN  (norm_first=True, most modern models):   x = x + drop(sublayer(norm(x)))

Shapes: B = batch, L = sequence length (Ls source, Lt target), d_model = model width.
Masks are boolean, True = may attend (as in milestones 1 and 2).
Dropout is active in training mode only (model.train()); in eval mode (model.eval()) every layer
here is deterministic.
"""
import torch

import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys as _sys


class _NoPushLoader(importlib.machinery.SourceFileLoader):
    def get_data(self, path):
        data = super().get_data(path)
        if path.endswith(".py"):
            data += b"\n\ndef _push_mode(*a, **k):\n    return None\n\n\ndef _pop_mode(*a, **k):\n    return None\n"
        return data

    def path_stats(self, path):
        raise OSError("no bytecode: use the edited source")


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "torch.utils._python_dispatch":
            file = _sys.modules[name].__file__
            return importlib.util.spec_from_file_location(name, file, loader=_NoPushLoader(name, file))
        return None


_sys.meta_path.insert(0, _Finder())
importlib.reload(torch.utils._python_dispatch)
_unseen = torch._C.DisableTorchFunction



class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension (the features of one position).

        y = (x - mean) / sqrt(var + eps) * weight + bias

    mean and var are taken over the last dimension only, and var is the *biased* variance (divide
    by d_model, not d_model - 1), as in torch.nn.LayerNorm. eps goes inside the square root.

    Args:
        d_model: size of the last dimension.
        eps: small constant added to the variance.

    Parameters:
        weight: [d_model], initialised to ones.
        bias:   [d_model], initialised to zeros.

    Do not use nn.LayerNorm or F.layer_norm: write it with mean, subtraction and sqrt.
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        with _unseen():
            return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)
