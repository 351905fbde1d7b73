"""Masks from gate scores, the baselines, and the evaluation at matched sparsity.

Paper: SeerAttention (arXiv 2410.13276), Sec. 3.3 and the official ``get_sparse_attn_mask_from_*``:
at inference the gate's block scores become a block mask either by a threshold
(``mask = tril(score > tau)``, the last two query-block rows dense) or by a per-row top-k
(``k = max(1, int((1 - sqrt(1 - nz_ratio)) n))`` for causal maps). Both rules come from the kernel
library (``companion_kernels.block_sparse.threshold_mask`` / ``topk_mask``). For a bidirectional
encoder every row has all ``n`` blocks, so the top-k keeps ``max(1, int(nz_ratio * n))`` per row
(no square-root rule: that rule only converts a causal-triangle density into a per-row budget).

Every method is compared at the *same* per-row budget (matched sparsity):

* ``gate``: the trained gate's scores; ``untrained``: a freshly initialised gate's scores;
* ``oracle``: the ground truth itself (the best any block selector can do for the max-pool target);
* ``random``: uniformly random scores (random blocks, same count per row);
* ``a-shape``: a fixed prior, the first key block (the attention sink) then the blocks nearest the
  diagonal (a local band); StreamingLLM's "A-shape" in block form.

Metrics: the attention-mass recall (share of the true softmax mass of each query block that the
selected key blocks hold, averaged over rows, heads and sequences), the recall of the max-pool
target, the held-out KL of a gate, and, when the model runs block-sparse with the selected masks in
every layer, the cosine similarity of its final output to the dense run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from companion.core.validation import ParameterError, check_float
from companion.seer_attention.gate import GateSet
from companion.models.attention import dense_attention, attention_session
from companion.seer_attention.ops import block_sparse_attention, pooled_attention_map

METHODS = ("gate", "untrained", "oracle", "random", "a-shape")


def _bs():
    import companion_kernels.block_sparse as bs

    return bs


def check_sparsity(sparsity: float, name: str = "sparsity") -> float:
    """A sparsity (share of blocks skipped) strictly between 0 and 1."""
    return check_float(name, sparsity, lo=0.0, hi=1.0, lo_open=True, hi_open=True)


def keep_per_row(n: int, sparsity: float, causal: bool) -> int:
    """Blocks kept per row at ``sparsity`` (the kernel library's top-k budget)."""
    return _bs().topk_rows(n, 1.0 - check_sparsity(sparsity), sqrt_rule=causal)


def topk_select(scores: torch.Tensor, sparsity: float, *, causal: bool, dense_last_rows: int | None = None) -> torch.Tensor:
    """Top-k block mask at ``sparsity`` (density ``1 - sparsity``) from any scores ``[..., n, n]``.

    Causal maps get the last two query-block rows dense, as the threshold rule does: the official
    ``get_sparse_attn_mask_from_nz_ratio(..., use_dense_for_last_block=True)`` applies
    ``last_block_dense`` to both selection rules. ``dense_last_rows`` overrides it (0: none)."""
    nz = 1.0 - check_sparsity(sparsity)
    if dense_last_rows is None:
        dense_last_rows = 2 if causal else 0
    return _bs().topk_mask(scores, nz, causal=causal, sqrt_rule=causal, dense_last_rows=dense_last_rows)


def threshold_select(scores: torch.Tensor, threshold: float, *, causal: bool, dense_last_rows: int | None = None) -> torch.Tensor:
    """Threshold block mask ``scores > threshold``; causal maps get the last two rows dense (the
    official ``last_block_dense=True``) and the diagonal forced on (no empty rows)."""
    check_float("threshold", threshold, lo=0.0, hi=1.0, hi_open=True)
    if dense_last_rows is None:
        dense_last_rows = 2 if causal else 0
    mask = _bs().threshold_mask(scores, threshold, dense_last_rows=dense_last_rows, causal=causal, force_diagonal=causal)
    if not causal:  # a bidirectional row may select nothing: keep its best block
        empty = ~mask.any(-1, keepdim=True)
        best = F.one_hot(scores.argmax(-1), scores.shape[-1]).bool()
        mask = mask | (empty & best)
    return mask


def ashape_scores(n: int, *, causal: bool, sink_blocks: int = 1, device=None) -> torch.Tensor:
    """A fixed A-shape prior ``[n, n]``: the sink block(s) first, then the blocks nearest the diagonal
    (earlier blocks before later ones at equal distance). Top-k of it at a budget ``k`` is the
    block-granular sink + local band with ``k`` blocks per row."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    dist = (i - j).abs().float()
    s = 1.0 / (1.0 + dist) + 1e-3 * (j <= i).float()
    s = torch.where(j < sink_blocks, torch.full_like(s, 2.0), s)
    if causal:
        s = s.masked_fill(j > i, 0.0)
    return s


def method_scores(method: str, *, gt: torch.Tensor, gate_logits: torch.Tensor | None = None,
                  untrained_logits: torch.Tensor | None = None, causal: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """The scores a method ranks blocks by, shaped like ``gt``."""
    if method == "gate":
        return torch.softmax(gate_logits, -1)
    if method == "untrained":
        return torch.softmax(untrained_logits, -1)
    if method == "oracle":
        return gt
    if method == "random":
        r = torch.rand(gt.shape, generator=generator).to(gt.device)
        return r
    if method == "a-shape":
        return ashape_scores(gt.shape[-1], causal=causal, device=gt.device).expand_as(gt)
    raise ParameterError("method", method, "one of " + ", ".join(repr(m) for m in METHODS))


def recall(target: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over rows of the share of ``target`` (rows summing to 1) inside ``mask``."""
    return float((target * mask).sum(-1).mean())


def density(mask: torch.Tensor, causal: bool) -> float:
    """Kept share of the visible blocks (the causal triangle for causal maps)."""
    return _bs().mask_density(mask, causal=causal)


@dataclass
class BlockEval:
    method: str
    sparsity: float
    density: float
    mass_recall: float
    gt_recall: float


def evaluate_blocks(gates: GateSet, untrained: GateSet, data, sparsities, *, seed: int = 0) -> list[BlockEval]:
    """Recall of every method at every sparsity on teacher ``data`` (with ``mass`` maps), all layers."""
    causal = gates.causal
    out = []
    with torch.no_grad():
        gl = [gates[l].logits_from_pooled(data.qp[l], data.kp[l]) for l in range(len(gates))]
        ul = [untrained[l].logits_from_pooled(data.qp[l], data.kp[l]) for l in range(len(gates))]
        for s in sparsities:
            check_sparsity(s)
            for m in METHODS:
                gen = torch.Generator().manual_seed(seed)
                d, mr, gr = [], [], []
                for l in range(len(gates)):
                    sc = method_scores(m, gt=data.gt[l], gate_logits=gl[l], untrained_logits=ul[l], causal=causal, generator=gen)
                    mask = topk_select(sc, s, causal=causal)
                    d.append(density(mask, causal))
                    mr.append(recall(data.mass[l], mask) if data.mass else float("nan"))
                    gr.append(recall(data.gt[l], mask))
                out.append(BlockEval(m, float(s), sum(d) / len(d), sum(mr) / len(mr), sum(gr) / len(gr)))
    return out


def final_hidden(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The model's last hidden states ``[S, N, hidden]`` (last_hidden_state, or the last of hidden_states)."""
    out = model(input_ids=input_ids, output_hidden_states=True)
    h = getattr(out, "last_hidden_state", None)
    return h if h is not None else out.hidden_states[-1]


def sparse_forward(
    model,
    input_ids: torch.Tensor,
    select,
    *,
    block_size: int,
    impl: str = "auto",
    batch_size: int = 4,
) -> tuple[torch.Tensor, list[float]]:
    """Run ``model`` with every attention layer block-sparse. ``select(layer=, q_pre=, k_pre=, q=, k=,
    causal=, scaling=, position_offset=)`` returns the block mask ``[B, H, n, n]`` for that layer.
    Returns the final hidden states and the realised density of each layer's masks."""
    dens: dict[int, list[float]] = {}

    def handler(*, layer, q_pre, k_pre, q, k, v, causal, scaling, position_offset):
        mask = select(layer=layer, q_pre=q_pre, k_pre=k_pre, q=q, k=k, causal=causal, scaling=scaling,
                      position_offset=position_offset)
        dens.setdefault(layer, []).append(density(mask, causal))
        return block_sparse_attention(q, k, v, mask, block_size=block_size, causal=causal, sm_scale=scaling, impl=impl)

    device = next(model.parameters()).device
    hs = []
    with torch.no_grad(), attention_session(model, handler):
        for s in range(0, input_ids.shape[0], batch_size):
            hs.append(final_hidden(model, input_ids[s:s + batch_size].to(device)))
    return torch.cat(hs), [sum(v) / len(v) for _, v in sorted(dens.items())]


def method_selector(method: str, sparsity: float, gates: GateSet, untrained: GateSet | None = None, *, seed: int = 0, impl: str = "auto"):
    """A ``select`` function for :func:`sparse_forward` that applies ``method`` at ``sparsity``."""
    check_sparsity(sparsity)
    gen = torch.Generator().manual_seed(seed)
    B = gates.block_size

    def select(*, layer, q_pre, k_pre, q, k, causal, scaling, position_offset):
        gt = None
        if method == "oracle":
            gt = pooled_attention_map(q, k, block_size=B, causal=causal, sm_scale=scaling, impl=impl)
        n = -(-q.shape[2] // B)
        shape_like = gt if gt is not None else torch.empty(q.shape[0], q.shape[1], n, n, device=q.device)
        gl = gates[layer](q_pre, k_pre, position_offset) if method == "gate" else None
        ul = untrained[layer](q_pre, k_pre, position_offset) if method == "untrained" else None
        sc = method_scores(method, gt=shape_like, gate_logits=gl, untrained_logits=ul, causal=causal, generator=gen)
        return topk_select(sc, sparsity, causal=causal)

    return select


def output_similarity(dense: torch.Tensor, sparse: torch.Tensor) -> dict:
    """Cosine of the mean-pooled outputs (MiniLM's sentence embedding) and mean per-token cosine."""
    emb = F.cosine_similarity(dense.mean(1), sparse.mean(1), dim=-1)
    tok = F.cosine_similarity(dense, sparse, dim=-1).mean(1)
    return {"embedding_cosine": float(emb.mean()), "embedding_cosine_min": float(emb.min()), "token_cosine": float(tok.mean())}


def evaluate_outputs(model, input_ids, gates: GateSet, untrained: GateSet, sparsities, *, methods=METHODS, seed: int = 0,
                     impl: str = "auto", batch_size: int = 4) -> list[dict]:
    """Output similarity to dense for every method and sparsity when the whole model runs block-sparse."""
    device = next(model.parameters()).device
    with torch.no_grad():
        dense = torch.cat([final_hidden(model, input_ids[s:s + batch_size].to(device)) for s in range(0, input_ids.shape[0], batch_size)])
    rows = []
    for s in sparsities:
        for m in methods:
            sel = method_selector(m, s, gates, untrained, seed=seed, impl=impl)
            hs, dens = sparse_forward(model, input_ids, sel, block_size=gates.block_size, impl=impl, batch_size=batch_size)
            rows.append({"method": m, "sparsity": float(s), "density": sum(dens) / len(dens), **output_similarity(dense, hs)})
    return rows


def head_output_cosine(q, k, v, mask, *, block_size: int, causal: bool, scaling: float) -> float:
    """Cosine (mean over tokens) between one head's block-sparse and dense attention outputs.
    ``q, k, v [H, N, d]`` or ``[N, d]``; ``mask`` the matching block mask."""
    if q.dim() == 2:
        q, k, v, mask = q[None], k[None], v[None], mask[None]
    q4, k4, v4 = q[None].float(), k[None].float(), v[None].float()
    dense = dense_attention(q4, k4, v4, causal, scaling)
    sparse = block_sparse_attention(q4, k4, v4, mask[None], block_size=block_size, causal=causal, sm_scale=scaling, impl="reference")
    return float(F.cosine_similarity(dense, sparse, dim=-1).mean())
