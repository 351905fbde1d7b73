"""A planted-structure model: attention biases that make known layers drafters (paper 03, test of Eq. 1-2).

A randomly initialised :class:`~companion.scalekv.model.TinyVAR` whose attention logits get an
additive bias that depends only on each key's scale and 2-D position (carried in the cache, so the
bias follows the keys through compression):

* drafter layers: ``+history`` on every key of earlier scales, so attention spreads over the
  history (low current-map share -> low ASI);
* refiner layers: ``-locality * d^2`` on current-map keys, ``d`` the distance between query and key
  centres in units of the current map's cells, and ``-2 * history`` on earlier scales (attention stays on
  the neighbourhood of the query in the current map -> high ASI).

ASI must rank the planted drafters lowest at every scale, and at equal memory ScaleKV (which gives
those layers more cache) must disturb the model's states less than a uniform budget.
"""

from __future__ import annotations

import torch

from companion.scalekv.model import TinyVAR, VARConfig
from companion.scalekv.schedule import check_schedule

__all__ = ["PlantedBias", "planted_model"]


class PlantedBias:
    """``bias(layer, scale, q_pos [q], k_pos [B, H, L]) -> [B, H, q, L]``."""

    def __init__(self, sides, drafter_layers, *, history: float = 4.0, locality: float = 1.0):
        self.sides = check_schedule(sides)
        self.drafters = frozenset(int(x) for x in drafter_layers)
        self.history, self.locality = float(history), float(locality)
        sc, ys, xs = [], [], []
        for k, s in enumerate(self.sides):
            c = (torch.arange(s, dtype=torch.float32) + 0.5) / s
            yy, xx = torch.meshgrid(c, c, indexing="ij")
            sc.append(torch.full((s * s,), k))
            ys.append(yy.reshape(-1))
            xs.append(xx.reshape(-1))
        self.scale_of, self.y, self.x = torch.cat(sc), torch.cat(ys), torch.cat(xs)

    def __call__(self, layer: int, scale: int, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        dev = k_pos.device
        ks = self.scale_of.to(dev)[k_pos]  # [B, H, L]
        hist = (ks < scale).float()[:, :, None, :]
        if layer in self.drafters:
            return self.history * hist
        s = self.sides[scale]
        qy, qx = self.y.to(dev)[q_pos], self.x.to(dev)[q_pos]
        ky, kx = self.y.to(dev)[k_pos], self.x.to(dev)[k_pos]
        d2 = ((qy[None, None, :, None] - ky[:, :, None, :]) ** 2 + (qx[None, None, :, None] - kx[:, :, None, :]) ** 2) * s * s
        return -self.locality * d2 * (1 - hist) - 2 * self.history * hist


def planted_model(sides=(1, 2, 3, 4, 6, 8, 12, 16), layers: int = 6, drafters=(1, 4), *, dim: int = 64, heads: int = 4,
                  seed: int = 0, history: float = 4.0, locality: float = 1.0) -> tuple[TinyVAR, PlantedBias]:
    """A random TinyVAR plus the bias that plants ``drafters`` among ``layers``."""
    torch.manual_seed(seed)
    model = TinyVAR(VARConfig(sides=tuple(sides), layers=layers, dim=dim, heads=heads))
    with torch.no_grad():  # larger random weights so the model's own logits are not negligible
        for blk in model.blocks:
            blk.attn.qkv.weight.normal_(0, 0.15)
            blk.attn.proj.weight.normal_(0, 0.15)
        model.tok_embed.weight.normal_(0, 1.0)
        model.class_embed.weight.normal_(0, 1.0)
    model.eval()
    return model, PlantedBias(sides, drafters, history=history, locality=locality)
