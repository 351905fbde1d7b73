"""SeerAttention's prefill gate (AttnGate): pooled Q/K, per-head linear maps, block RoPE, softmax.

Paper: Gao et al., *SeerAttention: Self-distilled Attention Gating for Efficient Long-context
Prefilling* (NeurIPS 2025; arXiv 2410.13276, Sec. 3.1 and Fig. 2). For every layer and head, with
block size ``B`` and ``n = ceil(N / B)`` blocks::

    Q_c = AvgPool_B(Q) W_q                                   # [n, d_g]  (Q before RoPE)
    K_c = concat(MaxPool_B(K), MinPool_B(K), AvgPool_B(K)) W_k  # [n, d_g]  (K before RoPE)
    Q_c, K_c = RoPE(Q_c), RoPE(K_c) at the block-start positions 0, B, 2B, ...   ("block RoPE")
    score = softmax(Q_c K_c^T / sqrt(d_g) + block_mask)      # [n, n], every row sums to 1

``block_mask`` is the causal block mask (``-inf`` above the block diagonal) for decoders and nothing
for bidirectional encoders. ``W_q`` is ``[H, d, d_g]`` and ``W_k`` is ``[H_kv, 3d, d_g]``; under
grouped-query attention the key side is computed once per KV head and repeated for its query heads,
as in the official code. Weights start from ``N(0, 0.02)`` (the official ``initializer_range``), so
an untrained gate scores every visible block almost equally.

Deviations from the official code, and why:

* A query-side linear map is always present. The official gate drops ``W_q`` when the query side has
  one pooling and ``d_g`` equals the head dimension; keeping it makes every gate the same shape and
  costs ``H d d_g`` parameters. The paper's equations have both maps.
* Pooling over a last, partial block uses only that block's real tokens (``ceil_mode`` semantics,
  written out explicitly), so ``N mod B != 0`` and ``N < B`` are exact.
* ``rope_theta=None`` switches block RoPE off. That is the right choice for a model without RoPE,
  such as all-MiniLM-L6-v2 (BERT, learned absolute position embeddings added to the input): its
  Q and K already carry position, and there is no rotary frequency to scale, so a rotation would
  inject a position signal the teacher does not have.
* The gate's scores are computed in float32 whatever the input dtype (the gate is tiny).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from companion.core.atomic import write_atomic
from companion.core.validation import ParameterError, check_bool, check_int
from companion.models.rope import apply_rope, rope_cos_sin

POOLINGS = ("avg", "max", "min")
INIT_STD = 0.02  # the official initializer_range for the gate's MultiHeadLinear weights


def n_blocks(seq_len: int, block_size: int) -> int:
    """``ceil(seq_len / block_size)``: the number of (possibly partial) blocks."""
    return -(-seq_len // block_size)


def block_pool(x: torch.Tensor, block_size: int, kind: str) -> torch.Tensor:
    """Pool ``x [..., N, D]`` over blocks of ``block_size`` tokens along ``N`` -> ``[..., n, D]``.

    ``kind`` is ``"avg"``, ``"max"`` or ``"min"``. A last, partial block is pooled over its real tokens
    only (the ``ceil_mode`` semantics of PyTorch's pooling layers).
    """
    if kind not in POOLINGS:
        raise ParameterError("pooling", kind, "one of " + ", ".join(repr(p) for p in POOLINGS))
    check_int("block_size", block_size, lo=1)
    *lead, N, D = x.shape
    n = n_blocks(N, block_size)
    pad = n * block_size - N
    if kind == "avg":
        xs = F.pad(x, (0, 0, 0, pad)).reshape(*lead, n, block_size, D).sum(-2)
        counts = torch.full((n,), float(block_size), dtype=x.dtype, device=x.device)
        counts[-1] = block_size - pad
        return xs / counts[:, None]
    fill = float("-inf") if kind == "max" else float("inf")
    xb = F.pad(x, (0, 0, 0, pad), value=fill).reshape(*lead, n, block_size, D)
    return xb.amax(-2) if kind == "max" else xb.amin(-2)


def block_rope(x: torch.Tensor, block_size: int, theta: float, position_offset: int = 0) -> torch.Tensor:
    """Block RoPE: rotate the pooled ``x [..., n, d_g]`` at the block-start positions
    ``position_offset + 0, B, 2B, ...`` (the first token of each block, like ``position_ids[:, ::B]``
    in the official code)."""
    n, d = x.shape[-2], x.shape[-1]
    pos = position_offset + block_size * torch.arange(n, device=x.device)
    cos, sin = rope_cos_sin(pos, d, base=theta)
    return apply_rope(x, cos, sin)


def gate_logits(
    qp: torch.Tensor,
    kp: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    *,
    block_size: int,
    causal: bool,
    rope_theta: float | None,
    position_offset: int = 0,
) -> torch.Tensor:
    """The gate's equations on pooled features: ``qp [B, H, n, i_q]``, ``kp [B, H_kv, n, i_k]``,
    ``w_q [H, i_q, d_g]``, ``w_k [H_kv, i_k, d_g]`` -> logits ``[B, H, n, n]``. Heads may be the
    heads of several layers stacked (the layers' gates are independent), which is how training
    evaluates all gates of a model in one call."""
    gate_dim = w_q.shape[-1]
    qc = torch.einsum("bhni,hio->bhno", qp, w_q)
    kc = torch.einsum("bhni,hio->bhno", kp, w_k)
    if rope_theta is not None:
        qc = block_rope(qc, block_size, rope_theta, position_offset)
        kc = block_rope(kc, block_size, rope_theta, position_offset)
    if kc.shape[1] != qc.shape[1]:
        kc = kc.repeat_interleave(qc.shape[1] // kc.shape[1], dim=1)
    logits = qc @ kc.transpose(-1, -2) / math.sqrt(gate_dim)
    if causal:
        nq, nk = logits.shape[-2:]
        visible = torch.ones(nq, nk, dtype=torch.bool, device=logits.device).tril(nk - nq)
        logits = logits.masked_fill(~visible, float("-inf"))
    return logits


class AttnGate(nn.Module):
    """The gate of one attention layer: all its heads at once.

    Args:
        num_heads: query heads ``H``.
        head_dim: the model's head dimension ``d``.
        block_size: tokens per block ``B``.
        gate_dim: the gate's hidden size ``d_g`` (the paper uses 128; even when RoPE is on).
        num_kv_heads: key/value heads (``H`` unless the model uses grouped-query attention).
        causal: causal block mask (decoders) or none (encoders).
        rope_theta: the model's RoPE base for block RoPE, or None for a model without RoPE.
        q_pool, k_pool: the pooling of each side; the paper's best is ``("avg",)`` and
            ``("max", "min", "avg")``.
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        block_size: int = 64,
        gate_dim: int = 128,
        *,
        num_kv_heads: int | None = None,
        causal: bool = True,
        rope_theta: float | None = None,
        q_pool: Sequence[str] = ("avg",),
        k_pool: Sequence[str] = ("max", "min", "avg"),
    ):
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, lo=1)
        self.head_dim = check_int("head_dim", head_dim, lo=1)
        self.block_size = check_int("block_size", block_size, lo=1)
        self.gate_dim = check_int("gate_dim", gate_dim, lo=1)
        self.num_kv_heads = check_int("num_kv_heads", num_heads if num_kv_heads is None else num_kv_heads, lo=1)
        if self.num_heads % self.num_kv_heads:
            raise ParameterError("num_kv_heads", num_kv_heads, f"a divisor of num_heads={num_heads}")
        self.causal = check_bool("causal", causal)
        if rope_theta is not None:
            if isinstance(rope_theta, bool) or not isinstance(rope_theta, (int, float)) or not rope_theta > 1:
                raise ParameterError("rope_theta", rope_theta, "None (no RoPE) or a number > 1")
            if gate_dim % 2:
                raise ParameterError("gate_dim", gate_dim, "an even number when block RoPE is on")
        self.rope_theta = None if rope_theta is None else float(rope_theta)
        for name, pools in (("q_pool", q_pool), ("k_pool", k_pool)):
            if not pools or any(p not in POOLINGS for p in pools) or len(set(pools)) != len(pools):
                raise ParameterError(name, tuple(pools), "a non-empty tuple of distinct poolings from " + str(POOLINGS))
        self.q_pool, self.k_pool = tuple(q_pool), tuple(k_pool)
        self.w_q = nn.Parameter(torch.empty(self.num_heads, len(self.q_pool) * head_dim, gate_dim))
        self.w_k = nn.Parameter(torch.empty(self.num_kv_heads, len(self.k_pool) * head_dim, gate_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.w_q, std=INIT_STD)
        nn.init.normal_(self.w_k, std=INIT_STD)

    def config(self) -> dict:
        return dict(
            num_heads=self.num_heads, head_dim=self.head_dim, block_size=self.block_size, gate_dim=self.gate_dim,
            num_kv_heads=self.num_kv_heads, causal=self.causal, rope_theta=self.rope_theta,
            q_pool=list(self.q_pool), k_pool=list(self.k_pool),
        )

    # -- the two halves of the forward pass ------------------------------------------------------
    def pool(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Parameter-free part: ``q [B, H, N, d]``, ``k [B, H_kv, N, d]`` (both before RoPE) ->
        pooled ``[B, H, n, |q_pool| d]`` and ``[B, H_kv, n, |k_pool| d]`` in float32."""
        self._check_qk(q, k)
        q, k = q.float(), k.float()
        qp = torch.cat([block_pool(q, self.block_size, p) for p in self.q_pool], dim=-1)
        kp = torch.cat([block_pool(k, self.block_size, p) for p in self.k_pool], dim=-1)
        return qp, kp

    def logits_from_pooled(self, qp: torch.Tensor, kp: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        """Learned part: pooled features -> masked logits ``[B, H, n_q, n_k]`` (``-inf`` where masked)."""
        return gate_logits(qp, kp, self.w_q, self.w_k, block_size=self.block_size, causal=self.causal,
                           rope_theta=self.rope_theta, position_offset=position_offset)

    def scores_from_pooled(self, qp: torch.Tensor, kp: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        """Softmax of :meth:`logits_from_pooled`: the gate's block scores (rows sum to 1)."""
        return torch.softmax(self.logits_from_pooled(qp, kp, position_offset), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        """Gate logits ``[B, H, n, n]`` for ``q``, ``k`` taken before RoPE; softmax them for scores."""
        return self.logits_from_pooled(*self.pool(q, k), position_offset=position_offset)

    def scores(self, q: torch.Tensor, k: torch.Tensor, position_offset: int = 0) -> torch.Tensor:
        """The gate's block scores: row-wise softmax of :meth:`forward` (rows sum to 1)."""
        return torch.softmax(self(q, k, position_offset), dim=-1)

    def _check_qk(self, q: torch.Tensor, k: torch.Tensor) -> None:
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(f"q and k must be [batch, heads, tokens, head_dim]; got {tuple(q.shape)} and {tuple(k.shape)}")
        if q.shape[1] != self.num_heads or k.shape[1] != self.num_kv_heads:
            raise ValueError(
                f"the gate expects {self.num_heads} query heads and {self.num_kv_heads} key heads; "
                f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
            )
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"the gate expects head_dim={self.head_dim}; got q {tuple(q.shape)} and k {tuple(k.shape)}")
        if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k must have the same batch and length (prefill); got {tuple(q.shape)} and {tuple(k.shape)}")


class GateSet(nn.Module):
    """One :class:`AttnGate` per layer of a model, saved and loaded with safetensors."""

    def __init__(self, num_layers: int, **gate_kwargs):
        super().__init__()
        check_int("num_layers", num_layers, lo=1)
        self.gates = nn.ModuleList([AttnGate(**gate_kwargs) for _ in range(num_layers)])

    def __len__(self) -> int:
        return len(self.gates)

    def __getitem__(self, layer: int) -> AttnGate:
        return self.gates[layer]

    @property
    def block_size(self) -> int:
        return self.gates[0].block_size

    @property
    def causal(self) -> bool:
        return self.gates[0].causal

    def config(self) -> dict:
        return {"num_layers": len(self.gates), **self.gates[0].config()}

    def save(self, path, metadata: dict | None = None) -> Path:
        """Write the weights and the config (as safetensors metadata) atomically to ``path``."""
        from safetensors.torch import save_file

        meta = {"seer_gate_config": json.dumps(self.config())}
        meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        return write_atomic(path, lambda tmp: save_file(tensors, tmp, metadata=meta))

    @classmethod
    def load(cls, path, device: str | torch.device = "cpu") -> "GateSet":
        """Rebuild a :class:`GateSet` saved by :meth:`save`."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no gate weights at {path}")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if "seer_gate_config" not in meta:
            raise ValueError(f"{path} is not a SeerAttention gate file (no 'seer_gate_config' metadata)")
        cfg = json.loads(meta["seer_gate_config"])
        cfg["q_pool"], cfg["k_pool"] = tuple(cfg["q_pool"]), tuple(cfg["k_pool"])
        gates = cls(**cfg)
        gates.load_state_dict(load_file(str(path)))
        return gates.to(device)


def count_parameters(module: nn.Module) -> int:
    """Trainable parameters of a gate (or any module)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
