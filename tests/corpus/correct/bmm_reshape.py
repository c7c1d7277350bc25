# style: folds batch and heads into one axis and uses torch.bmm with a comparison-based mask
import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.vdot(q1, k1)) - torch.exp(torch.vdot(q2, k2)) + lambda_init


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    b, h, t, d = q1.shape
    flat = [x.reshape(b * h, t, x.shape[-1]) for x in (q1, k1, q2, k2, value)]
    pos = torch.arange(t, device=value.device)
    hidden = pos[None, :] > pos[:, None]
    probs = []
    for q, k in (flat[0:2], flat[2:4]):
        scores = torch.bmm(q, k.transpose(1, 2)).div(math.sqrt(d))
        if causal:
            scores = scores.masked_fill(hidden, -float("inf"))
        probs.append(torch.softmax(scores, dim=2))
    out = torch.bmm(probs[0] - coefficient * probs[1], flat[4])
    return out.reshape(b, h, t, 2 * d)
