"""Mistake: a student who learnt "padding is 0" writes 0 after <eos> in both greedy decoders (greedy_decode and
greedy_decode_cached): two functions with the same mistake, so it is charged in each one's group.

CATCHES: greedy, kv_cache
DIAGNOSIS: pads_with_zero

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)                               # [B, Ls, d_model]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                next_token = _next_token_logits(model, ys, memory, src_mask).argmax(dim=-1)   # [B]
                next_token = next_token.masked_fill(finished, 0)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)          # [B, t + 1]
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys


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
                x = model.tgt_embed(ys[:, -1:]) + pe[t]                         # [B, 1, d_model]
                for i, layer in enumerate(layers):
                    x = _decoder_layer_step(layer, x, i, cache, cross_mask)
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                next_token = model.generator(x[:, -1]).argmax(dim=-1)           # [B]
                next_token = next_token.masked_fill(finished, 0)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
