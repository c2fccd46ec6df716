"""Mistake: two at once. beam_search runs without torch.no_grad() (every step builds an autograd graph), and
it returns the hypothesis with the best raw summed log-probability, forgetting the length penalty.

CATCHES: beam, modes
DIAGNOSIS: length_penalty_forgotten, grad_enabled

BASE: reference
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        B, K = src.size(0), beam_size
        device = src.device
        memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)         # [B*K, Ls, d_model]
        src_mask_k = src_mask.repeat_interleave(K, dim=0)                        # [B*K, 1, Ls]
        tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)
        scores = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=device)
        scores[:, 0] = 0.0
        finished = torch.zeros(B, K, dtype=torch.bool, device=device)
        for _ in range(max_len):
            t = tokens.size(2)
            logits = _next_token_logits(model, tokens.reshape(B * K, t), memory, src_mask_k)
            V = logits.size(-1)
            logp = torch.log_softmax(logits, dim=-1).reshape(B, K, V)
            pad_only = torch.full_like(logp, float("-inf"))
            pad_only[..., pad_id] = 0.0
            logp = torch.where(finished.unsqueeze(-1), pad_only, logp)
            scores, flat = (scores.unsqueeze(-1) + logp).reshape(B, K * V).topk(K, dim=-1)
            beam, token = flat // V, flat % V
            tokens = torch.cat([tokens.gather(1, beam.unsqueeze(-1).expand(B, K, t)), token.unsqueeze(-1)], dim=2)
            finished = finished.gather(1, beam) | (token == eos_id)
            if (finished | torch.isinf(scores)).all():
                break
        best = scores.argmax(dim=-1)                       # the most probable hypothesis
        rows = torch.arange(B, device=device)
        return tokens[rows, best], scores[rows, best].detach()
    finally:
        model.train(was_training)
