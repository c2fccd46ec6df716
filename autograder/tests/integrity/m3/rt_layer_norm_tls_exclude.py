"""ATTACK (written by the red team, outside the course team): LayerNorm.forward runs F.layer_norm (forbidden) after torch._C._dispatch_tls_set_dispatch_key_excluded(DispatchKey.Python, True) (and PythonTLSSnapshot), inside DisableTorchFunction; the old TLS state is put back.

EXPECT: score_at_most=19

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: F.layer_norm with the Python dispatch key excluded
# 
# LayerNorm.forward runs F.layer_norm (forbidden) after torch._C._dispatch_tls_set_dispatch_key_excluded(DispatchKey.Python, True) (and PythonTLSSnapshot), inside DisableTorchFunction; the old TLS state is put back.
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


@contextlib.contextmanager
def _unseen():
    keys = (torch._C.DispatchKey.Python, torch._C.DispatchKey.PythonTLSSnapshot)
    before = [torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in keys]
    for k in keys:
        torch._C._dispatch_tls_set_dispatch_key_excluded(k, True)
    try:
        with torch._C.DisableTorchFunction():
            yield
    finally:
        for k, b in zip(keys, before):
            torch._C._dispatch_tls_set_dispatch_key_excluded(k, b)



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
