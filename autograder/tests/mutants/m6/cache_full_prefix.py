"""Mistake: the 'cached' decoder runs model.decode on the whole prefix every step.

CATCHES: kv_cache
DIAGNOSIS: cache_not_used

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
                cache.cross_k[i] = split_heads(layer.cross_attn.w_k(memory), layer.cross_attn.num_heads)  # [B, H, Ls, d_k]
                cache.cross_v[i] = split_heads(layer.cross_attn.w_v(memory), layer.cross_attn.num_heads)
            cross_mask = None if src_mask is None else src_mask.unsqueeze(1)   # [B, 1, 1, Ls]
            pe = model.pos_encoding.pe                                          # [max_positions, d_model]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for t in range(max_len):
                if t >= pe.size(0):
                    raise ValueError(f"position {t} is beyond the positional encoding's max_len {pe.size(0)}")
                x = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), device=ys.device))
                next_token = model.generator(x[:, -1]).argmax(dim=-1)           # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
