"""Written blind from the stub docstrings: PositionalEncoding calls F.dropout(x + pe, p) without training=self.training, so it also drops in eval mode.

CATCHES: positional_module
DIAGNOSIS: dropout_in_eval

BASE: reference
"""
import torch.nn.functional as F
from torch import nn


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to a batch of embeddings, then applies dropout.

    Args:
        d_model: width of the embeddings.
        max_len: longest sequence supported.
        dropout: dropout probability on the sum (training mode only).

    Buffers:
        pe: [max_len, d_model], sinusoidal_positional_encoding(max_len, d_model). Register it with
            self.register_buffer("pe", ...): it is not a parameter (never trained), but it moves
            with model.to(device) and model.double().
    """

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))   # [max_len, d_model]
        self.p = dropout

    def forward(self, x):
        """x [B, L, d_model] -> dropout(x + pe[:L]), [B, L, d_model]. Position 0 gets row 0.

        Raises:
            ValueError: if L > max_len; the message gives both numbers.
        The input is not modified.
        """
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length {L} is longer than max_len {self.pe.size(0)}")
        return F.dropout(x + self.pe[:L], self.p)                                   # [B, L, d_model]
