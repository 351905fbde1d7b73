"""A tiny RoPE decoder with planted attention patterns, the long-context teacher of the GPU section.

SeerAttention (arXiv 2410.13276) distils gates from Llama-3.1-8B on 64k-token chunks; its Fig. 1
shows the patterns real heads have: A-shape (sink + local), vertical (a few keys every query
reads), slash (a fixed offset) and block-sparse mixtures. No such model is on these machines, and a
*randomly initialised* decoder attends almost uniformly (its logits are ~0), so distilling from it
would teach nothing. We therefore plant those patterns into a random ``tiny_llama`` through its
query/key biases and a few weights. This is our construction, not the paper's, and it is stated as
such wherever it is used. Every head keeps its random content part, so the maps are noisy.

How the patterns arise (HF Llama's rotate-half RoPE: dims ``f`` and ``f + d/2`` rotate at
``theta_f = rope_theta^(-2f/d)``):

* *local* / *slash*: a query bias ``a`` on dims ``f`` in a frequency band and a key bias ``c`` at
  phase ``phi_f = delta * theta_f`` in the same pairs add ``a c sum_f cos((i - j - delta) theta_f)``
  to the logit of query ``i`` and key ``j``: a band around ``i - j = delta`` whose width is set by the
  band of frequencies (RoPE's long-range decay). ``delta = 0`` is a local head, ``delta > 0`` a slash.
* the random output projections (attention ``o_proj``, MLP ``down_proj``) are scaled by 0.05 so
  the residual stream stays close to the embeddings and the planted patterns work in every layer.
* *vertical* / *sink*: a marker token's embedding gets a large component along a unit vector ``m``;
  the key rows of two slowly rotating pairs read ``m`` and the query bias on those dims is constant,
  so every query scores the marker keys highly at any distance. The marker of the sink is the
  beginning-of-sequence byte (0) every window starts with; the vertical marker is the newline byte, which in our text occurs only in the blank line between two docstrings (a document boundary, every ~600 bytes).

The gate must recover all of this from pooled, pre-RoPE Q/K: local and slash heads need block RoPE
(pooled Q/K are nearly constant, only the position carries the pattern), vertical heads need the
max-pool of K (a single marker token inside a 64-token block).
"""

from __future__ import annotations

import math

import torch
from torch import nn

BOS = 0  # never occurs in text
VERTICAL_MARKER = ord("\n")  # the blank line between two docstrings: a document boundary

# one entry per head type (cycled over heads): band of frequency indices as fractions of d/2,
# peak logit of the positional part, slash offset in tokens, and marker strengths (peak logits)
HEAD_TYPES = (
    {"name": "local (narrow)", "band": (0.25, 0.50), "peak": 12.0, "offset": 0, "markers": {}},
    {"name": "A-shape (sink + local)", "band": (0.30, 0.55), "peak": 10.0, "offset": 0, "markers": {BOS: 14.0}},
    {"name": "slash (offset 1024)", "band": (0.30, 0.50), "peak": 12.0, "offset": 1024, "markers": {}},
    {"name": "vertical (document boundaries)", "band": None, "peak": 0.0, "offset": 0, "markers": {VERTICAL_MARKER: 12.0, BOS: 8.0}},
    {"name": "local (wide)", "band": (0.40, 0.65), "peak": 10.0, "offset": 0, "markers": {}},
    {"name": "slash (offset 4096) + sink", "band": (0.35, 0.55), "peak": 12.0, "offset": 4096, "markers": {BOS: 10.0}},
    {"name": "vertical + local", "band": (0.30, 0.50), "peak": 8.0, "offset": 0, "markers": {VERTICAL_MARKER: 10.0}},
    {"name": "A-shape (strong sink)", "band": (0.25, 0.45), "peak": 10.0, "offset": 0, "markers": {BOS: 16.0}},
)
OUTPUT_DAMPING = 0.05
_MARKER_PAIRS = {BOS: 2, VERTICAL_MARKER: 4}  # marker -> index (from the slow end) of its first pair


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", 10000.0))


def _ensure_bias(linear: nn.Linear) -> torch.Tensor:
    if linear.bias is None:
        linear.bias = nn.Parameter(torch.zeros(linear.out_features, dtype=linear.weight.dtype, device=linear.weight.device))
    return linear.bias


@torch.no_grad()
def plant_patterns(model, *, seed: int = 0, head_types=HEAD_TYPES) -> list[str]:
    """Plant the head types into a Llama-style ``model`` in place (heads cycle through ``head_types``;
    layer ``l`` starts the cycle at ``l``). Returns the type name of every (layer, head), layer-major.
    The model must have one key head per query head (no GQA) and tie nothing to the embedding rows
    of the marker bytes."""
    cfg = model.config
    H = cfg.num_attention_heads
    if getattr(cfg, "num_key_value_heads", H) != H:
        raise ValueError("plant_patterns needs num_key_value_heads == num_attention_heads")
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    half = d // 2
    theta = _rope_theta(cfg)
    freqs = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / d)
    g = torch.Generator().manual_seed(seed)
    hidden = cfg.hidden_size
    markers = sorted(_MARKER_PAIRS)
    dirs = torch.linalg.qr(torch.randn(hidden, len(markers), generator=g, dtype=torch.float64))[0].T  # orthonormal
    emb = model.get_input_embeddings().weight
    for t, m in zip(markers, dirs):
        emb[t] += (3.0 * math.sqrt(hidden) * emb.std()).to(emb.dtype) * m.to(emb.dtype)
    x_dot_m = math.sqrt(hidden)  # after RMSNorm a marker token's hidden state has |x . m| ~ sqrt(hidden)
    names = []
    layers = model.model.layers
    for l, layer in enumerate(layers):
        attn = layer.self_attn
        # damp the random output maps so every layer's input stays close to the token embeddings
        # (otherwise random layers scramble the residual stream and the markers fade after layer 0)
        attn.o_proj.weight.mul_(OUTPUT_DAMPING)
        layer.mlp.down_proj.weight.mul_(OUTPUT_DAMPING)
        bq, bk = _ensure_bias(attn.q_proj), _ensure_bias(attn.k_proj)
        wk = attn.k_proj.weight
        for h in range(H):
            spec = head_types[(h + l) % len(head_types)]
            names.append(spec["name"])
            sl = slice(h * d, (h + 1) * d)
            qb = torch.zeros(d, dtype=torch.float64)
            kb = torch.zeros(d, dtype=torch.float64)
            if spec["band"] is not None:
                lo, hi = int(spec["band"][0] * half), max(int(spec["band"][1] * half), int(spec["band"][0] * half) + 1)
                band = torch.arange(lo, hi)
                # a * c * |band| * scale = peak logit, with a = 1
                c = spec["peak"] * math.sqrt(d) / len(band)
                phase = spec["offset"] * freqs[band]
                qb[band] = 1.0
                kb[band] = c * torch.cos(phase)
                kb[band + half] = c * torch.sin(phase)
            for t, strength in spec["markers"].items():
                first = half - _MARKER_PAIRS[t]
                pair = torch.arange(first, first + 2)  # two slow pairs: rotation < 0.3 rad over 128k tokens
                qb[pair] = 1.0
                kappa = strength * math.sqrt(d) / (len(pair) * x_dot_m)
                m = dirs[markers.index(t)]
                wk[sl][pair] += (kappa * m[None, :]).to(wk.dtype)
            bq[sl] = qb.to(bq.dtype)
            bk[sl] = kb.to(bk.dtype)
    return names


def planted_decoder(*, num_layers: int = 2, num_heads: int = 8, head_dim: int = 64, max_position: int = 131072 + 64,
                    rope_theta: float = 1e6, seed: int = 0):
    """``(model, head_names)``: ``companion.models.tiny_llama`` (byte vocabulary) with planted patterns."""
    from companion.models import tiny_llama

    model = tiny_llama(vocab_size=256, hidden_size=num_heads * head_dim, num_layers=num_layers, num_heads=num_heads,
                       max_position=max_position, rope_theta=rope_theta, seed=seed)
    names = plant_patterns(model, seed=seed)
    return model, names


def with_bos(ids: torch.Tensor) -> torch.Tensor:
    """Put the beginning-of-sequence byte at position 0 of every window (same length)."""
    ids = ids.clone()
    ids[:, 0] = BOS
    return ids
