"""Correct: greedy_decode and greedy_decode_cached write into a [B, max_len + 1] buffer filled with pad_id
(the argument, whatever its value) and return the columns used; the cached decoder keeps its keys and values
in buffers preallocated in memory's dtype (float32 models included) and attends over the filled part.

BASE: correct/m6/blind_student.py
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            B = src.size(0)
            out = torch.full((B, max_len + 1), pad_id, dtype=torch.long, device=src.device)
            out[:, 0] = bos_id
            alive = torch.ones(B, dtype=torch.bool, device=src.device)
            used = 1
            for t in range(1, max_len + 1):
                nxt = _next_token_logits(model, out[:, :t], memory, src_mask).argmax(dim=-1)
                out[:, t] = torch.where(alive, nxt, out[:, t])             # ended rows keep their pad_id
                alive = alive & (nxt != eos_id)
                used = t + 1
                if not bool(alive.any()):
                    break
            return out[:, :used]
    finally:
        model.train(was_training)


class KVCache:
    """Per layer: self-attention keys/values in buffers [B, H, max_len, d_k] (filled up to `size`), and the
    cross-attention keys/values of memory."""

    def __init__(self, num_layers):
        self.size = 0
        self.self_k = [None] * num_layers
        self.self_v = [None] * num_layers
        self.cross_k = [None] * num_layers
        self.cross_v = [None] * num_layers

    def allocate(self, B, heads, length, d_k, like):
        for i in range(len(self.self_k)):
            self.self_k[i] = like.new_zeros(B, heads, length, d_k)
            self.self_v[i] = like.new_zeros(B, heads, length, d_k)

    def append_self(self, i, k, v):
        """Write the newest position's keys/values [B, H, 1, d_k] at position `size` of layer i."""
        self.self_k[i][:, :, self.size:self.size + 1] = k
        self.self_v[i][:, :, self.size:self.size + 1] = v
        return self.self_k[i][:, :, :self.size + 1], self.self_v[i][:, :, :self.size + 1]


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)                             # [B, Ls, d_model]
            B, d_model = src.size(0), memory.size(-1)
            layers = model.decoder.layers
            cache = KVCache(len(layers))
            heads = layers[0].self_attn.num_heads
            cache.allocate(B, heads, max_len, d_model // heads, memory)
            for i, layer in enumerate(layers):
                ca = layer.cross_attn
                cache.cross_k[i] = split_heads(ca.w_k(memory), ca.num_heads)
                cache.cross_v[i] = split_heads(ca.w_v(memory), ca.num_heads)
            mask4 = src_mask[:, None]                                        # [B, 1, 1, Ls]
            out = torch.full((B, max_len + 1), pad_id, dtype=torch.long, device=src.device)
            out[:, 0] = bos_id
            alive = torch.ones(B, dtype=torch.bool, device=src.device)
            used = 1
            for t in range(max_len):
                x = model.tgt_embed(out[:, t:t + 1]) + model.pos_encoding.pe[t]
                for i, layer in enumerate(layers):
                    x = _decoder_layer_step(layer, x, i, cache, mask4)
                cache.size += 1
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                nxt = model.generator(x[:, -1]).argmax(dim=-1)
                out[:, t + 1] = torch.where(alive, nxt, out[:, t + 1])
                alive = alive & (nxt != eos_id)
                used = t + 2
                if not bool(alive.any()):
                    break
            return out[:, :used]
    finally:
        model.train(was_training)
