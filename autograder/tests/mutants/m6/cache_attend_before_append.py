"""Mistake: the newest position attends to the cache before its own keys are appended.

CATCHES: kv_cache, batched
DIAGNOSIS: cache_without_new_position

BASE: reference
"""


def _decoder_layer_step(layer, x, i, cache, src_mask):
    def self_attention(h):
        k = split_heads(layer.self_attn.w_k(h), layer.self_attn.num_heads)    # [B, H, 1, d_k]
        v = split_heads(layer.self_attn.w_v(h), layer.self_attn.num_heads)
        if cache.self_k[i] is None:
            k_old = v_old = k[:, :, :0]
        else:
            k_old, v_old = cache.self_k[i], cache.self_v[i]
        cache.append_self(i, k, v)
        return _attend(layer.self_attn, h, k_old, v_old, None)

    def cross_attention(h):
        return _attend(layer.cross_attn, h, cache.cross_k[i], cache.cross_v[i], src_mask)

    if layer.norm_first:
        x = x + self_attention(layer.norm1(x))
        x = x + cross_attention(layer.norm2(x))
        x = x + layer.feed_forward(layer.norm3(x))
    else:
        x = layer.norm1(x + self_attention(x))
        x = layer.norm2(x + cross_attention(x))
        x = layer.norm3(x + layer.feed_forward(x))
    return x
