"""The stable-softmax exercise's reference: shift by the maximum, exponentiate, normalise."""

import torch


def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim``."""
    shifted = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return shifted / shifted.sum(dim=dim, keepdim=True)
