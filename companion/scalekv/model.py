"""A tiny VAR-style next-scale-prediction transformer with a per-layer KV cache (paper 03's setting).

Paper: ScaleKV (Li et al., NeurIPS 2025, arXiv 2505.19602), Sec. 2: next-scale prediction
``p(r_1..r_K) = prod_k p(r_k | r_<k)``. Step ``k`` predicts the whole ``s_k x s_k`` token map in
parallel; its input is the previous map, embedded and upsampled to ``s_k x s_k`` (bilinear), plus a
scale (level) embedding and a 2-D sin/cos position on *normalised* coordinates (so a location has
the same code at every scale, as Infinity's normalised 2-D RoPE does). Scale 0 is the class token.
Attention is block-causal over scales: a token sees every earlier map and its whole own map.

Training runs the whole sequence at once with that block mask (teacher forcing). Generation runs
scale by scale with a KV cache that keeps K/V (and each kept key's original position) per layer;
after the attention of step ``k`` a :class:`~companion.scalekv.cache.CachePolicy` may compress each
layer's cache, exactly where the official ``enable_scale_kv_*.py`` patch calls ``update_kv``.

Deviations from Infinity (deliberate, for a model that trains in seconds on a CPU): class
conditioning is an added class embedding (Infinity: text cross-attention and AdaLN), plain
pre-LayerNorm blocks with softmax attention (Infinity: cosine attention with RoPE), tokens are
quantised grey levels (see ``data.py``), and sampling uses Gumbel noise drawn from a seed so that
every cache policy sees identical randomness (the paper fixes the seed likewise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.core import ParameterError, check_float, check_int
from companion.scalekv.schedule import check_schedule, cumulative_tokens, map_sizes

__all__ = ["VARConfig", "TinyVAR", "LayerCache", "Generation", "generate", "block_causal_mask", "positions_2d"]


@dataclass
class VARConfig:
    sides: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
    vocab: int = 8
    num_classes: int = 10
    dim: int = 64
    heads: int = 4
    layers: int = 4
    mlp_ratio: int = 4

    def __post_init__(self):
        self.sides = check_schedule(self.sides)
        check_int("vocab", self.vocab, lo=2)
        check_int("num_classes", self.num_classes, lo=1)
        check_int("heads", self.heads, lo=1)
        check_int("layers", self.layers, lo=1)
        check_int("mlp_ratio", self.mlp_ratio, lo=1)
        check_int("dim", self.dim, lo=self.heads)
        if self.dim % 4 or self.dim % self.heads:
            raise ParameterError("dim", self.dim, f"a multiple of 4 (2-D sin/cos positions) and of heads={self.heads}")

    def to_dict(self) -> dict:
        return asdict(self)


def block_causal_mask(sides: Sequence[int], device=None) -> torch.Tensor:
    """Boolean ``[N, N]``: query ``i`` may attend key ``j`` iff scale(j) <= scale(i)."""
    scale = torch.cat([torch.full((n,), k) for k, n in enumerate(map_sizes(sides))]).to(device)
    return scale[None, :] <= scale[:, None]


def positions_2d(sides: Sequence[int], dim: int) -> torch.Tensor:
    """``[N, dim]`` sin/cos codes of each token's cell centre in [0, 1]^2 (same frame at every scale)."""
    quarter = dim // 4
    freqs = torch.exp(torch.arange(quarter, dtype=torch.float32) * (-math.log(100.0) / max(quarter, 1))) * math.pi * 4
    rows = []
    for s in sides:
        c = (torch.arange(s, dtype=torch.float32) + 0.5) / s
        yy, xx = torch.meshgrid(c, c, indexing="ij")
        y, x = yy.reshape(-1, 1) * freqs, xx.reshape(-1, 1) * freqs
        rows.append(torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], dim=1))
    pos = torch.cat(rows)
    if pos.shape[1] < dim:
        pos = F.pad(pos, (0, dim - pos.shape[1]))
    return pos


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v  # each [B, H, n, D]

    def merge(self, o: torch.Tensor) -> torch.Tensor:
        b, h, n, d = o.shape
        return self.proj(o.transpose(1, 2).reshape(b, n, h * d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor, groups: Sequence[tuple[int, int, torch.Tensor | None]]) -> torch.Tensor:
        """Block-causal self-attention over scales, one call per group of scales.

        ``groups`` holds ``(lo, hi, mask)``: the queries ``x[:, lo:hi]`` attend keys ``[0, hi)`` under
        ``mask`` (the block-causal mask's rows ``lo:hi``; None when the group is one scale, which sees
        every key before ``hi``). The same function as one call with :func:`block_causal_mask`, about
        twice as fast on a CPU because the masked pairs of the large scales are never formed.
        """
        q, k, v = self.attn.split(self.ln1(x))
        outs = [F.scaled_dot_product_attention(q[:, :, lo:hi], k[:, :, :hi], v[:, :, :hi], attn_mask=m) for lo, hi, m in groups]
        x = x + self.attn.merge(torch.cat(outs, dim=2))
        return x + self.mlp(self.ln2(x))


class TinyVAR(nn.Module):
    """Class-conditional next-scale predictor over quantised token maps."""

    def __init__(self, config: VARConfig | None = None, **kwargs):
        super().__init__()
        self.config = config = config or VARConfig(**kwargs)
        d = config.dim
        self.tok_embed = nn.Embedding(config.vocab, d)
        self.class_embed = nn.Embedding(config.num_classes + 1, d)  # the last row is the null class (guidance)
        self.level_embed = nn.Embedding(len(config.sides), d)
        self.blocks = nn.ModuleList([Block(d, config.heads, config.mlp_ratio) for _ in range(config.layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, config.vocab)
        self.register_buffer("pos", positions_2d(config.sides, d), persistent=False)
        self.register_buffer("mask", block_causal_mask(config.sides), persistent=False)
        self.sizes = map_sizes(config.sides)
        self.cum = cumulative_tokens(config.sides)
        self.starts = [c - n for c, n in zip(self.cum, self.sizes)]
        # Attention groups for training: the small scales together under the mask, each larger scale alone.
        small = max([k for k, c in enumerate(self.cum) if c <= 64], default=0)
        self._group_bounds = [(0, self.cum[small])] + [(self.starts[k], self.cum[k]) for k in range(small + 1, len(self.sizes))]
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):  # unit scale, like the sin/cos positions they are added to
            nn.init.normal_(m.weight, std=1.0)

    @property
    def num_tokens(self) -> int:
        return self.cum[-1]

    def scale_input(self, k: int, prev_tokens: torch.Tensor | None, labels: torch.Tensor) -> torch.Tensor:
        """Input embeddings of map ``k`` ``[B, s_k^2, d]`` from the tokens of map ``k-1``."""
        s = self.config.sides[k]
        cls = self.class_embed(labels)[:, None, :]
        if k == 0:
            x = cls
        else:
            sp = self.config.sides[k - 1]
            e = self.tok_embed(prev_tokens).transpose(1, 2).reshape(-1, self.config.dim, sp, sp)
            x = F.interpolate(e, size=(s, s), mode="bilinear", align_corners=False).flatten(2).transpose(1, 2) + cls
        lo, hi = self.starts[k], self.cum[k]
        return x + self.level_embed.weight[k] + self.pos[lo:hi]

    def sequence_input(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Teacher-forced inputs of all scales ``[B, N, d]`` from the ground-truth maps."""
        parts = []
        for k in range(len(self.sizes)):
            prev = None if k == 0 else tokens[:, self.starts[k - 1] : self.cum[k - 1]]
            parts.append(self.scale_input(k, prev, labels))
        return torch.cat(parts, dim=1)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, N, vocab]`` of every map, block-causal (training)."""
        x = self.sequence_input(tokens, labels)
        lo0, hi0 = self._group_bounds[0]
        groups = [(lo0, hi0, self.mask[lo0:hi0, :hi0])] + [(lo, hi, None) for lo, hi in self._group_bounds[1:]]
        for blk in self.blocks:
            x = blk(x, groups)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self(tokens, labels)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


@dataclass
class LayerCache:
    """One layer's KV cache: ``k, v [B, H, L, D]`` and each kept key's global position ``pos [B, H, L]``."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    pos: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> None:
        if self.k is None:
            self.k, self.v, self.pos = k, v, pos
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
            self.pos = torch.cat([self.pos, pos], dim=2)

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def nbytes(self) -> int:
        return 0 if self.k is None else self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


@dataclass
class Generation:
    """What a generation run returns (all on the CPU).

    ``tokens [B, N]`` every map's tokens; ``hidden [B, N, d]`` final-layer states; ``logits
    [B, N, vocab]``; ``retained [L, K]`` cache tokens per layer after step ``k`` (what step ``k+1``
    attends to besides its own map); ``attended [L, K]`` keys seen by step ``k``'s queries;
    ``retained_bytes [L, K]`` bytes of those K/V tensors; ``kept_positions`` per layer the global
    positions kept after the last step ([B, H, L]).
    """

    tokens: torch.Tensor
    hidden: torch.Tensor
    logits: torch.Tensor
    retained: torch.Tensor
    attended: torch.Tensor
    retained_bytes: torch.Tensor
    kept_positions: list = field(default_factory=list)


def _gumbel(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(seed))
    u = torch.rand(shape, generator=g).clamp_(1e-9, 1 - 1e-9)
    return -torch.log(-torch.log(u))


@torch.no_grad()
def generate(
    model: TinyVAR,
    labels: torch.Tensor,
    policy=None,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    guidance: float = 0.0,
    force_tokens: torch.Tensor | None = None,
    observer=None,
    bias=None,
) -> Generation:
    """Generate every map scale by scale with a KV cache, compressed by ``policy`` (None = full cache).

    ``guidance`` ``w >= 0``: classifier-free guidance as in Infinity, the batch is doubled with the
    null class and the logits are ``(1 + w) * cond - w * uncond`` (both halves are fed the same
    sampled tokens; the cache, and its bytes, hold both halves). ``force_tokens [B, N]`` replaces
    sampling (teacher forcing through the cache: isolates the error a policy causes).
    ``observer(layer, scale, probs, cache)`` receives the attention probabilities ``[B', H, |r_k|,
    L]`` of each step with the cache it attended (used for the ASI). ``bias(layer, scale, q_pos,
    k_pos)`` adds to the attention logits (the planted-structure model). Sampling: ``argmax(logits
    / temperature + g)`` with Gumbel noise ``g`` drawn from ``seed`` (``temperature=0``: greedy),
    so every cache policy sees identical randomness.
    """
    check_float("temperature", temperature, lo=0.0)
    check_float("guidance", guidance, lo=0.0)
    model.eval()
    cfg = model.config
    device = model.pos.device
    labels = labels.to(device)
    b = labels.shape[0]
    if guidance > 0:
        labels = torch.cat([labels, torch.full_like(labels, cfg.num_classes)])
    bb = labels.shape[0]
    nl, ns = cfg.layers, len(cfg.sides)
    caches = [LayerCache() for _ in range(nl)]
    if policy is not None:
        policy.reset(nl)
    noise = _gumbel((b, model.num_tokens, cfg.vocab), seed) if temperature > 0 and force_tokens is None else None
    retained = torch.zeros(nl, ns, dtype=torch.long)
    attended = torch.zeros(nl, ns, dtype=torch.long)
    rbytes = torch.zeros(nl, ns, dtype=torch.long)
    tokens, hiddens, logits_all = [], [], []
    prev = None
    for k in range(ns):
        lo, hi = model.starts[k], model.cum[k]
        x = model.scale_input(k, prev, labels)
        q_pos = torch.arange(lo, hi, device=device)
        for li, blk in enumerate(model.blocks):
            attn = blk.attn
            q, kk, vv = attn.split(blk.ln1(x))
            cache = caches[li]
            cache.append(kk, vv, q_pos.expand(bb, attn.heads, -1))
            attended[li, k] = cache.length
            if observer is None and bias is None:
                o = F.scaled_dot_product_attention(q, cache.k, cache.v)
            else:
                s = q @ cache.k.transpose(-1, -2) / math.sqrt(attn.head_dim)
                if bias is not None:
                    s = s + bias(li, k, q_pos, cache.pos)
                p = torch.softmax(s, dim=-1)
                if observer is not None:
                    observer(li, k, p, cache)
                o = p @ cache.v
            x = x + attn.merge(o)
            x = x + blk.mlp(blk.ln2(x))
            if policy is not None:
                policy.compress(li, k, cache, q)
            retained[li, k] = cache.length
            rbytes[li, k] = cache.nbytes()
        h = model.norm(x)
        lg = model.head(h)
        if guidance > 0:
            lg = (1 + guidance) * lg[:b] - guidance * lg[b:]
            h = h[:b]
        if force_tokens is not None:
            tk = force_tokens[:, lo:hi].to(device)
        elif temperature > 0:
            tk = (lg / temperature + noise[:, lo:hi].to(device)).argmax(-1)
        else:
            tk = lg.argmax(-1)
        tokens.append(tk)
        hiddens.append(h)
        logits_all.append(lg)
        prev = torch.cat([tk, tk]) if guidance > 0 else tk
    return Generation(
        tokens=torch.cat(tokens, 1).cpu(),
        hidden=torch.cat(hiddens, 1).float().cpu(),
        logits=torch.cat(logits_all, 1).float().cpu(),
        retained=retained,
        attended=attended,
        retained_bytes=rbytes,
        kept_positions=[c.pos.cpu() for c in caches],
    )
