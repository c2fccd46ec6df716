"""Mistake: pre-LN keys and values from the raw stream.

CATCHES: kv_cache
DIAGNOSIS: cached_pre_ln_raw_keys

BASE: reference
"""


def _decoder_layer_step(layer, x, i, cache, src_mask):
    def self_attention(h, raw=None):
        src_kv = h if raw is None else raw
        k = split_heads(layer.self_attn.w_k(src_kv), layer.self_attn.num_heads)    # [B, H, 1, d_k]
        v = split_heads(layer.self_attn.w_v(src_kv), layer.self_attn.num_heads)
        k_all, v_all = cache.append_self(i, k, v)                             # [B, H, t, d_k]
        return _attend(layer.self_attn, h, k_all, v_all, None)

    def cross_attention(h):
        return _attend(layer.cross_attn, h, cache.cross_k[i], cache.cross_v[i], src_mask)

    if layer.norm_first:
        x = x + self_attention(layer.norm1(x), x)
        x = x + cross_attention(layer.norm2(x))
        x = x + layer.feed_forward(layer.norm3(x))
    else:
        x = layer.norm1(x + self_attention(x))
        x = layer.norm2(x + cross_attention(x))
        x = layer.norm3(x + layer.feed_forward(x))
    return x
