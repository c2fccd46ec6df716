"""Correct: beam search takes its dtype from the log-probabilities it computes (the scores are made at the
first step as zeros_like of them, so a float32 model gives float32 scores), blocks finished hypotheses with
masked_fill and lets them through at pad_id (the argument, whatever its value) with torch.where, and keeps
the lengths as a count of unfinished steps.

BASE: correct/m6/blind_student.py
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.size(0), beam_size
            memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)   # [B*K, Ls, d_model]
            mask_k = src_mask.repeat_interleave(K, dim=0)
            tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)
            scores = None                                                     # [B, K], made at the first step
            finished = torch.zeros(B, K, dtype=torch.bool, device=src.device)
            steps_alive = torch.zeros(B, K, dtype=torch.long, device=src.device)
            for step in range(max_len):
                logp = torch.log_softmax(_next_token_logits(model, tokens, memory, mask_k), dim=-1)
                V = logp.size(-1)
                logp = logp.view(B, K, V)
                if scores is None:                                            # one start hypothesis
                    scores = torch.zeros_like(logp[..., 0]).masked_fill(
                        torch.arange(K, device=src.device) > 0, float("-inf"))
                ended = finished.unsqueeze(-1)
                logp = logp.masked_fill(ended, float("-inf"))
                logp = torch.where(ended & (torch.arange(V, device=src.device) == pad_id),
                                   torch.zeros_like(logp), logp)
                flat = (scores.unsqueeze(-1) + logp).view(B, K * V)
                scores, idx = flat.topk(K, dim=-1)
                parent = idx.div(V, rounding_mode="floor")                   # [B, K]
                chosen = idx.remainder(V)
                rows = (parent + torch.arange(B, device=src.device).unsqueeze(1) * K).view(-1)
                tokens = torch.cat([tokens[rows], chosen.view(-1, 1)], dim=1)
                was = finished.gather(1, parent)
                steps_alive = steps_alive.gather(1, parent) + (~was).long()
                finished = was | (chosen == eos_id)
                if bool((finished | scores.isinf()).all()):
                    break
            norm = length_penalty_score(scores, steps_alive.to(scores.dtype), length_penalty)
            best = norm.argmax(dim=-1)
            pick = best + torch.arange(B, device=src.device) * K
            return tokens[pick], norm.gather(1, best.unsqueeze(1)).squeeze(1)
    finally:
        model.train(was_training)
