"""Weight normalisation (Sec. 4 of the paper; nGPT-inspired, without nGPT's activation normalisation).

After every optimiser step each weight matrix is projected to unit norm along the model-dimension axis:

* a matrix that **reads** the hidden state (``y = W x``, ``W ∈ R^{out x d}``): every row, ``W[i, :] ← W[i, :] / ||W[i, :]||₂``
  (attention / DeltaNet q, k, v, β, gate projections; Mamba2's ``in_proj``; the FFN's gate and up; the LM head);
* a matrix that **writes** into the residual stream (``W ∈ R^{d x in}``): every column,
  ``W[:, j] ← W[:, j] / ||W[:, j]||₂`` (attention / DeltaNet output, Mamba2's ``out_proj``, the FFN's down).

The released inference code keeps one trace of it: ``logits = logits / lm_head.weight.norm(dim=1)``
(:class:`~companion.nemotron_flash.model.HybridConfig` ``logits_norm``).

Unconfirmed by the paper text, so switchable here [inferred]:

* ``placement``: ``"after_step"`` (the default; the spec's reading of the abstract: project after each step, so
  the norms are exactly 1 whenever the model is used) or ``"before_step"`` (project, then step: the norms drift
  by one step's update);
* ``exempt``: ``"embedding"`` (default: the token embedding keeps its scale), ``"none"`` (its rows normalised
  too, as nGPT does) or ``"embedding_and_head"``.

Vectors (norm gains, biases, A_log, D, conv filters, meta tokens) are never normalised.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from companion.core import check_choice

PLACEMENTS = ("after_step", "before_step")
EXEMPT = ("embedding", "none", "embedding_and_head")
READS = frozenset({"q", "k", "v", "b", "a", "g_out", "in_proj", "gate", "up", "lm_head"})
WRITES = frozenset({"o", "out_proj", "down"})


def weight_roles(model: nn.Module, exempt: str = "embedding") -> dict[str, tuple[torch.Tensor, int]]:
    """``{name: (weight, dim)}``: ``dim=1`` normalises rows (reads), ``dim=0`` columns (writes)."""
    check_choice("exempt", exempt, EXEMPT)
    roles: dict[str, tuple[torch.Tensor, int]] = {}
    seen = set()
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(mod, nn.Linear):
            if leaf in READS:
                if leaf == "lm_head" and exempt == "embedding_and_head":
                    continue
                dim = 1
            elif leaf in WRITES:
                dim = 0
            else:
                continue
        elif isinstance(mod, nn.Embedding) and exempt == "none":
            dim = 1
        else:
            continue
        if id(mod.weight) in seen:
            continue
        seen.add(id(mod.weight))
        roles[name] = (mod.weight, dim)
    return roles


@torch.no_grad()
def normalize_(roles: dict, eps: float = 1e-12) -> None:
    """Project every weight in ``roles`` to unit norm along its dimension, in place."""
    for w, dim in roles.values():
        w.div_(w.norm(dim=dim, keepdim=True).clamp_min(eps))


@torch.no_grad()
def max_norm_error(roles: dict) -> float:
    """max |‖row or column‖₂ − 1| over all normalised weights (0 right after :func:`normalize_`)."""
    err = 0.0
    for w, dim in roles.values():
        err = max(err, float((w.double().norm(dim=dim) - 1).abs().max()))
    return err


class WeightNorm:
    """Wrap an optimiser step: ``wn.step(optimizer)`` does the step and the projection in the chosen order."""

    def __init__(self, model: nn.Module, placement: str = "after_step", exempt: str = "embedding"):
        self.placement = check_choice("placement", placement, PLACEMENTS)
        self.roles = weight_roles(model, exempt)
        normalize_(self.roles)

    def step(self, optimizer) -> None:
        if self.placement == "before_step":
            normalize_(self.roles)
            optimizer.step()
        else:
            optimizer.step()
            normalize_(self.roles)

    def error(self) -> float:
        return max_norm_error(self.roles)
