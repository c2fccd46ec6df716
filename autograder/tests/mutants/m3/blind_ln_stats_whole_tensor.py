"""Written blind from the stub docstrings: LayerNorm takes mean and variance over the whole tensor (x.mean(), x.var()) instead of over the last dimension.

CATCHES: layer_norm
DIAGNOSIS: normalises_whole_tensor
"""
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
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention


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
        """Normalise x [..., d_model] (any number of leading dimensions) -> [..., d_model].

        x, weight and bias share one dtype (float32 or float64); the output has that dtype too.
        The input is not modified.

        Example:
            LayerNorm(2) on [[1.0, 3.0]]: mean 2, biased variance 1 -> about [[-1.0, 1.0]]
            (exactly [[-1, 1]] / sqrt(1 + eps)).
        """
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class FeedForward(nn.Module):
    """Position-wise feed-forward network: linear2(dropout(activation(linear1(x)))).

    The same two-layer network is applied to every position separately.

    Args:
        d_model: input and output width.
        d_ff: hidden width (4 * d_model in the paper: 512 -> 2048).
        dropout: dropout probability on the hidden activations (after the activation, before
            linear2), in training mode only.
        activation: "relu" or "gelu" (lowercase). "gelu" is the exact, erf-based GELU
            (F.gelu with its default approximate="none"), not the tanh approximation.

    Submodules:
        linear1: nn.Linear(d_model, d_ff)
        linear2: nn.Linear(d_ff, d_model)

    Raises:
        ValueError: in the constructor, for any other activation; the message names the allowed
            values "relu" and "gelu".
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., d_model] -> [..., d_model]."""
        h = self.linear1(x)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        h = self.dropout(h)
        return self.linear2(h)


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then feed-forward, each with a residual connection.

    Args:
        d_model, num_heads: as in MultiHeadAttention.
        d_ff, activation: as in FeedForward.
        dropout: the one dropout probability used everywhere in the layer (training mode only):
            on the attention weights (inside self_attn), on the hidden activations of the
            feed-forward (inside feed_forward), and on the output of each sub-layer before it is
            added to the residual (the paper's section 5.4).
        norm_first: False = post-LN (the paper), True = pre-LN. Fixed when the layer is built.

    Submodules and attributes (the grader copies weights into them by these names):
        self_attn:    MultiHeadAttention(d_model, num_heads, dropout)
        feed_forward: FeedForward(d_model, d_ff, dropout, activation)
        norm1, norm2: LayerNorm(d_model), for the attention and the feed-forward sub-layer
        norm_first:   the bool given to the constructor
    Name the residual dropouts as you like (nn.Dropout modules or F.dropout calls both work).

    Computation ("drop" = dropout with probability `dropout`, training mode only):
        post-LN:  x = norm1(x + drop(self_attn(x, x, x, src_mask)))
                  x = norm2(x + drop(feed_forward(x)))
        pre-LN:   n = norm1(x);  x = x + drop(self_attn(n, n, n, src_mask))
                  x = x + drop(feed_forward(norm2(x)))
    In pre-LN the residual stream x itself is never normalised inside the layer (the final
    LayerNorm of the encoder stack does that, in milestone 4).

    The result matches nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, activation,
    batch_first=True, norm_first=norm_first) given the same weights.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, src_mask=None):
        """Run the layer.

        Args:
            x: [B, L, d_model]
            src_mask: None or bool, True = may attend, broadcastable to [B, L, L]; typically the
                padding mask [B, 1, L] of the source tokens.

        Returns:
            [B, L, d_model]. The input is not modified.
        """
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.drop1(self.self_attn(n, n, n, src_mask))
            x = x + self.drop2(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(x + self.drop1(self.self_attn(x, x, x, src_mask)))
            x = self.norm2(x + self.drop2(self.feed_forward(x)))
        return x


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention to the encoder output, feed-forward.

    Args: as EncoderLayer (one `dropout` for the attention weights of both attentions, inside the
        feed-forward, and on each of the three sub-layer outputs before its residual add).

    Submodules and attributes:
        self_attn:    MultiHeadAttention(d_model, num_heads, dropout), over the decoder positions
        cross_attn:   MultiHeadAttention(d_model, num_heads, dropout): queries from the decoder,
                      keys and values from `memory` (the encoder output)
        feed_forward: FeedForward(d_model, d_ff, dropout, activation)
        norm1, norm2, norm3: LayerNorm(d_model) for self-attention, cross-attention, feed-forward
        norm_first:   the bool given to the constructor

    Computation ("drop" = dropout, training mode only):
        post-LN:  x = norm1(x + drop(self_attn(x, x, x, tgt_mask)))
                  x = norm2(x + drop(cross_attn(x, memory, memory, src_mask)))
                  x = norm3(x + drop(feed_forward(x)))
        pre-LN:   n = norm1(x);  x = x + drop(self_attn(n, n, n, tgt_mask))
                  x = x + drop(cross_attn(norm2(x), memory, memory, src_mask))
                  x = x + drop(feed_forward(norm3(x)))
    `memory` is used as it is: never normalised here.

    The result matches nn.TransformerDecoderLayer(..., batch_first=True, norm_first=norm_first)
    given the same weights (PyTorch calls the cross-attention `multihead_attn`).
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)
        self.drop3 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """Run the layer.

        Args:
            x: decoder input [B, Lt, d_model]
            memory: encoder output [B, Ls, d_model]
            src_mask: None or bool, broadcastable to [B, Lt, Ls]: which source positions the
                cross-attention may look at (typically the source padding mask [B, 1, Ls]).
            tgt_mask: None or bool, broadcastable to [B, Lt, Lt]: which target positions the
                self-attention may look at (typically causal AND target padding, [B, Lt, Lt]).
                None means no mask at all: nothing causal is added for you.

        Returns:
            [B, Lt, d_model]. The inputs are not modified.
        """
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.drop1(self.self_attn(n, n, n, tgt_mask))
            x = x + self.drop2(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            x = x + self.drop3(self.feed_forward(self.norm3(x)))
        else:
            x = self.norm1(x + self.drop1(self.self_attn(x, x, x, tgt_mask)))
            x = self.norm2(x + self.drop2(self.cross_attn(x, memory, memory, src_mask)))
            x = self.norm3(x + self.drop3(self.feed_forward(x)))
        return x
