"""Mistake: the cached decoder computes the logits with the generator's weights by hand instead of calling model.generator.

CATCHES: kv_cache
DIAGNOSIS: generator_not_used

BASE: reference
"""


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """greedy_decode with a KV cache: the same tokens, far less work per step.

    Before the first step, compute every decoder layer's cross-attention keys and values of
    `memory` once (layer.cross_attn.w_k / w_v, split into heads). Each step then runs the decoder
    on the newest position only ([B, 1, d_model]: its token embedding plus the positional encoding
    row of its position, model.pos_encoding.pe[t]), layer by layer: self-attention projects the
    new position's keys and values, appends them to the cache and attends over all cached
    positions; cross-attention uses the cached memory keys and values. After the last layer comes
    the decoder's final norm (when there is one), then model.generator gives the logits whose
    argmax is the next token.

    Build it from the existing modules as they are: the layer's submodules (self_attn and
    cross_attn with w_q, w_k, w_v, w_o and num_heads; norm1..norm3; feed_forward; norm_first),
    split_heads / merge_heads of milestone 2 and scaled_dot_product_attention of milestone 1. Do
    not edit the earlier milestones' files. Works for post-LN and pre-LN models.

    Graded: the tokens, the logits given to model.generator at each step (those of the uncached
    decoder), and the work per step: the grader counts each step's matrix-multiply FLOPs
    (torch.utils.flop_counter), which must be those of the newest position alone (its projections,
    attention over the cached positions and memory, feed-forward, generator), not growing with the
    prefix and with no projection of memory after the first step.

    Args and return value: as greedy_decode (same rules: eval mode restored, no_grad, batched,
    stops once every sequence has ended).
    """
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
                logits = x[:, -1] @ model.generator.weight.T + model.generator.bias   # [B, V]
                next_token = logits.argmax(dim=-1)                              # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
