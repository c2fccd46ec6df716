"""Correct: the cached decoder applies the generator to [B, 1, d_model] and then drops the length axis.

BASE: correct/m6/blind_student.py
"""


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)                             # [B, Ls, d_model]
            B = src.size(0)
            layers = model.decoder.layers
            cache = KVCache(len(layers))
            for i, layer in enumerate(layers):
                ca = layer.cross_attn
                cache.cross_k[i] = split_heads(ca.w_k(memory), ca.num_heads)   # [B, H, Ls, d_k]
                cache.cross_v[i] = split_heads(ca.w_v(memory), ca.num_heads)
            mask4 = None if src_mask is None else src_mask.unsqueeze(1)      # [B, 1, 1, Ls]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            pe = model.pos_encoding.pe
            for t in range(max_len):
                x = model.tgt_embed(ys[:, -1:]) + pe[t]                      # [B, 1, d_model]
                for i, layer in enumerate(layers):
                    x = _decoder_layer_step(layer, x, i, cache, mask4)
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                logits = model.generator(x)[:, -1]
                nxt = logits.argmax(dim=-1).masked_fill(finished, pad_id)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == eos_id)
                if bool(finished.all()):
                    break
            return ys
    finally:
        model.train(was_training)
