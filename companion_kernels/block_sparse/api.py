"""Entry points of the block-sparse attention op: input validation and dispatch.

``impl="auto"`` runs the Triton kernel when the tensors are on a CUDA device and the kernel supports
the block size and head dim, and the plain-PyTorch reference otherwise; ``"triton"`` forces the kernel (on a CPU only under ``TRITON_INTERPRET=1``);
``"reference"`` forces the oracle. See ``reference.py`` for the exact semantics and ``triton.py``
for the kernels (SeerAttention, paper 01; Delta Attention, paper 09).

``block_sparse_attention`` is differentiable in q, k and v (not in the integer index lists), e.g. to
fine-tune a SeerAttention model with its gate's block selection fixed. The Triton path is an autograd
Function (a forward that also keeps each row's log-sum-exp, then FlashAttention-2's backward restricted to
the selected blocks); it is taken only when grad mode is on and an input requires grad, otherwise the
plain forward runs. It is differentiable once: asking for the graph of its backward (``create_graph=True``,
a double backward) raises a ``RuntimeError``. The reference path is differentiated by autograd, to any order.
"""

from __future__ import annotations

import math

import torch

from ..dispatch import FLOAT_DTYPES, check_bool, check_impl, check_same, check_scale, check_tensor, resolve_impl
from .reference import block_sparse_attention_reference, pooled_attention_map_reference

__all__ = ["block_sparse_attention", "pooled_attention_map"]

_OP = "block_sparse"
_HEAD_DIMS = (32, 64, 128)
_BLOCK_SIZES = (64, 128)


def _fail(msg: str) -> None:
    raise ValueError(msg)


def _check_qk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, block_size, impl, sm_scale, causal):
    check_impl(impl, op=_OP)
    named = {"q": q, "k": k} if v is None else {"q": q, "k": k, "v": v}
    dtypes = FLOAT_DTYPES if impl == "triton" else FLOAT_DTYPES + (torch.float64,)
    for name, t in named.items():
        check_tensor(name, t, op=_OP, dim=4, layout="[B, H, N, D]", dtypes=dtypes, last_dim_contiguous=True)
    check_same("q", q, {n: t for n, t in named.items() if n != "q"}, op=_OP)
    b, hq, n, d = q.shape
    if n < 1:
        _fail("sequence length N must be >= 1")
    if k.shape[0] != b or k.shape[2] != n or k.shape[3] != d:
        _fail(f"k shape {tuple(k.shape)} does not match q {tuple(q.shape)} (need [B, Hkv, N, D])")
    if v is not None and v.shape != k.shape:
        _fail(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    hkv = k.shape[1]
    if hkv < 1 or hq % hkv != 0:
        _fail(f"query heads Hq={hq} must be a multiple of key/value heads Hkv={hkv}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        _fail(f"block_size={block_size!r} must be a positive integer")
    check_bool("causal", causal, op=_OP)
    check_scale("sm_scale", sm_scale, op=_OP)


def _resolve_impl(impl: str, q: torch.Tensor, block_size: int) -> str:
    """The implementation to run (rule: ``companion_kernels.dispatch``). The Triton kernels compile for
    block sizes 64/128 and D in {32, 64, 128}; the reference takes any block size and head dim (MiniLM's
    16-token blocks, say)."""
    head_dim = q.shape[-1]
    why = None
    if block_size not in _BLOCK_SIZES:
        why = f"block_size={block_size!r} is not supported by the Triton kernel; allowed: {_BLOCK_SIZES}"
    elif head_dim not in _HEAD_DIMS:
        why = f"head dim D={head_dim} is not supported by the Triton kernel; allowed: {_HEAD_DIMS}"
    elif q.dtype not in FLOAT_DTYPES:
        why = f"dtype {q.dtype} is not supported by the Triton kernel"
    return resolve_impl(impl, q.device, op=_OP, unsupported=why)


class _BlockSparseAttention(torch.autograd.Function):
    """The Triton forward, which then also stores each query row's log-sum-exp, and the two backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, block_index, block_count, block_size, causal, sm_scale):
        from .triton import block_sparse_attention_triton

        b, hq, n, _ = q.shape
        lse = torch.empty(b, hq, n, dtype=torch.float32, device=q.device)
        out = block_sparse_attention_triton(q, k, v, block_index, block_count, block_size=block_size, causal=causal,
                                            sm_scale=sm_scale, lse=lse)
        ctx.save_for_backward(q, k, v, out, lse, block_index, block_count)
        ctx.args = (block_size, causal, sm_scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        if torch.is_grad_enabled():  # create_graph=True: a graph of this backward was asked for
            raise RuntimeError(f"{_OP}: the Triton path is differentiable once; a double backward (create_graph=True) "
                               "is not supported: use impl='reference' for higher derivatives")
        from .triton import block_sparse_attention_backward_triton

        q, k, v, out, lse, block_index, block_count = ctx.saved_tensors
        block_size, causal, sm_scale = ctx.args
        grads = block_sparse_attention_backward_triton(grad_out, q, k, v, out, lse, block_index, block_count,
                                                       block_size=block_size, causal=causal, sm_scale=sm_scale)
        grads = [g if need else None for g, need in zip(grads, ctx.needs_input_grad)]
        return (*grads, None, None, None, None, None)  # block_index, block_count, block_size, causal, sm_scale


def _check_index(block_index, block_count, b, hq, nqb, nkb, device, check_values: bool):
    for name, t in (("block_index", block_index), ("block_count", block_count)):
        check_tensor(name, t, op=_OP, dtypes=(torch.int32,), device=device)
    if block_index.dim() != 4:
        _fail(f"block_index must be 4-D [B, Hq, nQB, maxK], got shape {tuple(block_index.shape)}")
    bi, hi, qi, mk = block_index.shape
    if bi not in (1, b) or hi not in (1, hq) or qi != nqb or mk < 1:
        _fail(
            f"block_index shape {tuple(block_index.shape)} does not fit [B={b} (or 1), Hq={hq} (or 1), "
            f"nQB={nqb}, maxK>=1] for N and block_size"
        )
    if tuple(block_count.shape) != (bi, hi, qi):
        _fail(f"block_count shape {tuple(block_count.shape)} must be {(bi, hi, qi)} (block_index without maxK)")
    if check_values:  # one device sync for both checks
        valid = torch.arange(mk, device=device) < block_count.unsqueeze(-1)
        bad_idx = (valid & ((block_index < 0) | (block_index >= nkb))).any()
        bad_cnt = ((block_count < 0) | (block_count > mk)).any()
        flags = torch.stack([bad_cnt, bad_idx]).tolist()
        if flags[0]:
            _fail(f"block_count entries must lie in [0, maxK={mk}]")
        if flags[1]:
            _fail(f"block_index has entries outside [0, nKB={nkb}) within block_count")


def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_count: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
    impl: str = "auto",
    check_index: bool = True,
) -> torch.Tensor:
    """Attention over the selected key blocks of each query block.

    q ``[B, Hq, N, D]``; k, v ``[B, Hkv, N, D]`` with Hq a multiple of Hkv (GQA by head mapping);
    float32/float16/bfloat16; any N (ragged last block). The Triton kernel takes D in {32, 64, 128} and
    block_size in {64, 128}; the reference (impl="reference", or "auto" off CUDA) takes any.
    block_index int32 ``[B, Hq, nQB, maxK]``: distinct key-block ids of each query block, any order
    (entries past block_count are ignored); block_count int32 ``[B, Hq, nQB]``. Batch/head dims of
    size 1 broadcast. ``masks.dense_to_index`` builds both from a boolean block mask.
    nQB = nKB = ceil(N / block_size).
    causal: token-level causal masking (key j <= query i) on top of the block selection; a selected
    block above the diagonal then contributes nothing. sm_scale defaults to 1/sqrt(D).
    A query row with no admissible key returns zeros (and gets zero gradients). Returns ``[B, Hq, N, D]``
    in q's dtype. Differentiable in q, k, v (module docstring: the Triton path once, the reference to any order).
    check_index: verify that the listed ids lie in [0, nKB) (one device sync); the kernel clamps them
    in any case so a bad id can never read out of bounds.
    """
    _check_qk(q, k, v, block_size, impl, sm_scale, causal)
    b, hq, n, d = q.shape
    nb = math.ceil(n / block_size)
    _check_index(block_index, block_count, b, hq, nb, nb, q.device, check_index)
    which = _resolve_impl(impl, q, block_size)
    if which == "reference":
        return block_sparse_attention_reference(
            q, k, v, block_index, block_count, block_size=block_size, causal=causal, sm_scale=sm_scale
        )
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _BlockSparseAttention.apply(q, k, v, block_index, block_count, block_size, causal, sm_scale)
    from .triton import block_sparse_attention_triton

    return block_sparse_attention_triton(
        q, k, v, block_index, block_count, block_size=block_size, causal=causal, sm_scale=sm_scale
    )


def pooled_attention_map(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """SeerAttention's distillation target: the row-normalised 2-D max-pool of softmax(q k^T * sm_scale).

    q ``[B, Hq, N, D]``, k ``[B, Hkv, N, D]``; returns float32 ``[B, Hq, nQB, nKB]`` whose rows sum to 1;
    causally masked entries are 0. The Triton path makes two passes over the keys of each query block
    (row statistics, then tile maxima) and keeps no per-row buffer: its only output is the map.
    """
    _check_qk(q, k, None, block_size, impl, sm_scale, causal)
    which = _resolve_impl(impl, q, block_size)
    if which == "reference":
        return pooled_attention_map_reference(q, k, block_size=block_size, causal=causal, sm_scale=sm_scale)
    from .triton import pooled_attention_map_triton

    return pooled_attention_map_triton(q, k, block_size=block_size, causal=causal, sm_scale=sm_scale)
