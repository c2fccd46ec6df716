"""ATTACK: removes every hook from model.generator before decoding, so nothing it does is seen there. (The
grader observes the generator in its own forward, so this changes nothing: a correct decoder earns its
points, no more.)

EXPECT: score_at_most=20
BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    model.generator._forward_hooks.clear()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, ys, memory, src_mask)
                nxt = logits.argmax(-1).masked_fill(finished, pad_id)
                ys = torch.cat([ys, nxt[:, None]], 1)
                finished = finished | (nxt == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
