"""Mistake: greedy decodes only the unfinished rows but never leaves the loop: once every sequence has
ended it keeps running (model.generator on zero rows) until max_len.

CATCHES: greedy
DIAGNOSIS: no_early_stop

BASE: correct/m6/blind_student.py
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)                             # [B, Ls, d_model]
            B = src.size(0)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                active = (~finished).nonzero().squeeze(-1)                   # rows still decoding
                logits = _next_token_logits(model, ys[active], memory[active], src_mask[active])
                nxt = torch.full((B,), pad_id, dtype=torch.long, device=src.device)
                nxt = nxt.index_copy(0, active, logits.argmax(dim=-1))
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == eos_id)
            return ys
    finally:
        model.train(was_training)
