"""Block masks for block-sparse attention: dense <-> index lists, and the selection rules of the papers.

A *block mask* is a boolean tensor ``[..., nQB, nKB]``: entry (i, j) says that query block i attends to
key block j (blocks of ``block_size`` tokens; the last block may be ragged). The kernel consumes it as
*index lists* (CSR rows, the layout of FlexAttention's ``kv_indices``/``kv_num_blocks``):
``block_index`` int32 ``[..., nQB, maxK]`` holds the key-block ids of each query block in ascending
order, ``block_count`` int32 ``[..., nQB]`` how many of them are valid; entries past the count are
padding (filled with 0 here) and are never read.

Selection rules:

* SeerAttention (paper 01, arXiv 2410.13276, official code ``seer_attn/modules/common.py`` at
  ``aba03e3``): ``threshold_mask`` is ``tril(score > tau)`` with the last query-block rows forced dense
  (the official ``last_block_dense=True`` is ``dense_last_rows=2``); ``topk_mask`` keeps
  ``k = max(1, int((1 - sqrt(1 - nz_ratio)) * n))`` blocks per row, the square-root rule that turns a
  density of the causal triangle into a per-row budget. Deviation: in causal mode the non-causal
  entries are excluded *before* the top-k (the official code takes the top-k of the whole row and then
  applies ``tril``). For the gate's causal softmax scores, whose non-causal entries are exactly 0, the
  two agree; for arbitrary scores ours never spends the budget on blocks that ``tril`` removes.
  ``force_diagonal`` (off by default, as in the official code) adds the diagonal block so no row is
  empty; the kernel returns zeros for an empty row in any case.
* Delta Attention (paper 09, arXiv 2505.11254): ``sink_window_mask`` keeps the first
  ``sink_blocks`` key blocks and the ``window_blocks`` blocks before the diagonal, plus the diagonal
  (block-granular StreamingLLM, as in the anchors' FlexAttention mask).
* ``random_block_mask``: the benchmark protocol of the anchors file (the same number of kept blocks in
  every query-block row, chosen at random among the causal blocks, diagonal always kept).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "dense_to_index",
    "index_to_dense",
    "threshold_mask",
    "topk_mask",
    "sink_window_mask",
    "random_block_mask",
    "causal_block_mask",
    "mask_density",
]


def _check_bool_mask(name: str, mask: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, got dtype {mask.dtype}")
    if mask.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dims [..., nQB, nKB], got shape {tuple(mask.shape)}")


def dense_to_index(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean block mask ``[..., nQB, nKB]`` -> ``(block_index [..., nQB, maxK], block_count [..., nQB])``.

    Both int32, on the mask's device. Indices are ascending; ``maxK = max(1, largest row count)``;
    padding entries are 0.
    """
    _check_bool_mask("mask", mask)
    count = mask.sum(dim=-1, dtype=torch.int32)
    max_k = max(1, int(count.max().item())) if count.numel() else 1
    # A stable sort of "not selected" puts the selected columns first, in ascending order.
    order = torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices[..., :max_k]
    valid = torch.arange(max_k, device=mask.device) < count.unsqueeze(-1)
    index = torch.where(valid, order, torch.zeros((), dtype=order.dtype, device=mask.device))
    return index.to(torch.int32).contiguous(), count.contiguous()


def index_to_dense(block_index: torch.Tensor, block_count: torch.Tensor, num_key_blocks: int) -> torch.Tensor:
    """Index lists -> boolean block mask ``[..., nQB, num_key_blocks]`` (padding ignored)."""
    if not isinstance(num_key_blocks, int) or num_key_blocks < 1:
        raise ValueError(f"num_key_blocks must be a positive int, got {num_key_blocks!r}")
    if block_index.dim() < 2 or block_count.shape != block_index.shape[:-1]:
        raise ValueError(
            f"block_index [..., nQB, maxK] and block_count [..., nQB] disagree: "
            f"{tuple(block_index.shape)} vs {tuple(block_count.shape)}"
        )
    max_k = block_index.shape[-1]
    if (block_count < 0).any() or (block_count > max_k).any():
        raise ValueError(f"block_count must lie in [0, maxK={max_k}]")
    valid = torch.arange(max_k, device=block_index.device) < block_count.unsqueeze(-1).to(torch.long)
    idx = block_index.to(torch.long)
    bad = valid & ((idx < 0) | (idx >= num_key_blocks))
    if bad.any():
        raise ValueError(f"block_index has entries outside [0, {num_key_blocks}) within block_count")
    idx = torch.where(valid, idx, torch.full_like(idx, num_key_blocks))  # dump column for padding
    out = torch.zeros(*idx.shape[:-1], num_key_blocks + 1, dtype=torch.bool, device=idx.device)
    out.scatter_(-1, idx, True)
    return out[..., :num_key_blocks].contiguous()


def causal_block_mask(num_query_blocks: int, num_key_blocks: int, device=None) -> torch.Tensor:
    """Lower-triangular block mask (key block j <= query block i), bool ``[nQB, nKB]``."""
    i = torch.arange(num_query_blocks, device=device).unsqueeze(-1)
    j = torch.arange(num_key_blocks, device=device).unsqueeze(0)
    return j <= i


def _finish(mask: torch.Tensor, dense_last_rows: int, causal: bool, force_diagonal: bool) -> torch.Tensor:
    if not isinstance(dense_last_rows, int) or dense_last_rows < 0:
        raise ValueError(f"dense_last_rows must be an int >= 0, got {dense_last_rows!r}")
    if dense_last_rows:
        mask[..., -dense_last_rows:, :] = True
    nqb, nkb = mask.shape[-2:]
    if force_diagonal:
        diag = torch.eye(nqb, nkb, dtype=torch.bool, device=mask.device)
        mask |= diag
    if causal:
        mask &= causal_block_mask(nqb, nkb, device=mask.device)
    return mask


def threshold_mask(
    scores: torch.Tensor,
    threshold: float,
    *,
    dense_last_rows: int = 0,
    causal: bool = True,
    force_diagonal: bool = False,
) -> torch.Tensor:
    """SeerAttention's threshold rule: ``mask = scores > threshold``, the last ``dense_last_rows``
    query-block rows set dense, then ``tril`` when causal. ``scores`` ``[..., nQB, nKB]`` (the gate's
    softmax); returns bool of the same shape. The official ``last_block_dense=True`` is
    ``dense_last_rows=2``; the official default threshold is 2e-3 (LongBench), 5e-4 (RULER)."""
    if not isinstance(scores, torch.Tensor) or scores.dim() < 2:
        raise ValueError("scores must be a tensor [..., nQB, nKB]")
    if not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    mask = scores > threshold
    return _finish(mask, dense_last_rows, causal, force_diagonal)


def topk_rows(num_key_blocks: int, nz_ratio: float, sqrt_rule: bool = True) -> int:
    """Blocks kept per row by SeerAttention's top-k rule: ``max(1, int(r * n))`` with
    ``r = 1 - sqrt(1 - nz_ratio)`` (square-root rule) or ``r = nz_ratio``."""
    r = 1.0 - math.sqrt(1.0 - nz_ratio) if sqrt_rule else nz_ratio
    return max(1, int(r * num_key_blocks))


def topk_mask(
    scores: torch.Tensor,
    nz_ratio: float,
    *,
    causal: bool = True,
    sqrt_rule: bool = True,
    dense_last_rows: int = 0,
    force_diagonal: bool = False,
) -> torch.Tensor:
    """SeerAttention's top-k rule: keep the ``k = topk_rows(nKB, nz_ratio, sqrt_rule)`` highest-scoring
    key blocks of every query-block row (fewer where the causal row is shorter), then ``tril`` when
    causal. ``nz_ratio`` in (0, 1] is the target density of the (causal) block map."""
    if not isinstance(scores, torch.Tensor) or scores.dim() < 2:
        raise ValueError("scores must be a tensor [..., nQB, nKB]")
    if not isinstance(nz_ratio, (int, float)) or not (0.0 < nz_ratio <= 1.0):
        raise ValueError(f"nz_ratio must lie in (0, 1], got {nz_ratio!r}")
    nqb, nkb = scores.shape[-2:]
    k = min(topk_rows(nkb, float(nz_ratio), sqrt_rule), nkb)
    s = scores.float()
    if causal:
        s = s.masked_fill(~causal_block_mask(nqb, nkb, device=scores.device), float("-inf"))
    top = torch.topk(s, k, dim=-1).indices
    mask = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    mask.scatter_(-1, top, True)
    return _finish(mask, dense_last_rows, causal, force_diagonal)


def sink_window_mask(
    num_query_blocks: int,
    num_key_blocks: int,
    *,
    sink_blocks: int,
    window_blocks: int,
    causal: bool = True,
    device=None,
) -> torch.Tensor:
    """Block-granular sink + sliding-window mask, bool ``[nQB, nKB]`` (broadcasts over batch/heads).

    Keeps key block j for query block i when ``j < sink_blocks`` or ``|i - j| <= window_blocks``
    (the diagonal plus ``window_blocks`` blocks on each side; causal keeps only ``j <= i``).
    The anchors' Delta-Attention mask (8 sink blocks, 16 blocks before the diagonal, diagonal) is
    ``sink_window_mask(n, n, sink_blocks=8, window_blocks=16)``."""
    for name, v in (("num_query_blocks", num_query_blocks), ("num_key_blocks", num_key_blocks)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    for name, v in (("sink_blocks", sink_blocks), ("window_blocks", window_blocks)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    i = torch.arange(num_query_blocks, device=device).unsqueeze(-1)
    j = torch.arange(num_key_blocks, device=device).unsqueeze(0)
    mask = (j < sink_blocks) | ((i - j).abs() <= window_blocks)
    if causal:
        mask &= j <= i
    return mask


def _row_budget(num_blocks: int, density: float) -> int:
    """Per-row budget k whose kept share sum_i min(i + 1, k) / (n(n + 1)/2) is nearest to density."""
    total = num_blocks * (num_blocks + 1) / 2

    def share(k: int) -> float:
        return (k * (k + 1) // 2 + (num_blocks - k) * k) / total

    return min(range(1, num_blocks + 1), key=lambda k: abs(share(k) - density))


def random_block_mask(
    batch: int,
    heads: int,
    num_blocks: int,
    density: float,
    *,
    generator: torch.Generator | None = None,
    device=None,
) -> torch.Tensor:
    """Random causal block mask of the benchmark protocol, bool ``[batch, heads, n, n]``.

    Every query-block row keeps ``min(i + 1, k)`` blocks: the diagonal plus ``k - 1`` blocks drawn
    uniformly among its other causal blocks, with the one budget ``k`` chosen so that the kept share of
    the causal triangle is ``density`` (to within one block per row)."""
    if not (0.0 < density <= 1.0):
        raise ValueError(f"density must lie in (0, 1], got {density!r}")
    n = num_blocks
    k = _row_budget(n, density)
    causal = causal_block_mask(n, n)
    r = torch.rand(batch, heads, n, n, generator=generator)
    r = r.masked_fill(~causal, -1.0)
    r.diagonal(dim1=-2, dim2=-1).fill_(2.0)  # the diagonal always wins
    top = torch.topk(r, k, dim=-1).indices
    mask = torch.zeros(batch, heads, n, n, dtype=torch.bool)
    mask.scatter_(-1, top, True)
    mask &= causal
    return mask.to(device) if device is not None else mask


def mask_density(mask: torch.Tensor, causal: bool = True) -> float:
    """Kept share of the (causal) blocks of a block mask ``[..., nQB, nKB]``."""
    nqb, nkb = mask.shape[-2:]
    if causal:
        allowed = causal_block_mask(nqb, nkb, device=mask.device)
        total = int(allowed.sum()) * (mask.numel() // (nqb * nkb))
        return float((mask & allowed).sum()) / total
    return float(mask.float().mean())
