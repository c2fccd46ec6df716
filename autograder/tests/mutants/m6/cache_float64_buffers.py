"""Mistake: the cached decoder starts each layer's self-attention cache as an empty tensor created with
dtype=torch.float64 written out, so on a float32 model the cached keys become float64 and the attention
mixes float32 queries with float64 keys.

CATCHES: kv_cache
DIAGNOSIS: dtype_mismatch

BASE: reference
"""


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)                                # [B, Ls, d_model]
            layers = model.decoder.layers
            cache = KVCache(len(layers))
            for i, layer in enumerate(layers):
                heads = layer.self_attn.num_heads
                d_k = memory.size(-1) // heads
                empty = torch.zeros(B, heads, 0, d_k, dtype=torch.float64, device=src.device)
                cache.self_k[i], cache.self_v[i] = empty, empty                  # grows by cat
                cache.cross_k[i] = split_heads(layer.cross_attn.w_k(memory), layer.cross_attn.num_heads)
                cache.cross_v[i] = split_heads(layer.cross_attn.w_v(memory), layer.cross_attn.num_heads)
            cross_mask = None if src_mask is None else src_mask.unsqueeze(1)   # [B, 1, 1, Ls]
            pe = model.pos_encoding.pe
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for t in range(max_len):
                x = model.tgt_embed(ys[:, -1:]) + pe[t]                         # [B, 1, d_model]
                for i, layer in enumerate(layers):
                    x = _decoder_layer_step(layer, x, i, cache, cross_mask)
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                next_token = model.generator(x[:, -1]).argmax(dim=-1)           # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
