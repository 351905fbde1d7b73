"""SeerAttention's self-distillation: the frozen model teaches its own gates (Sec. 3.2, Eq. 3-4).

For every layer the ground truth is the row-normalised 2-D max-pool of the attention the model
computes (the kernel op's ``pooled_attention_map``)::

    gt   = RowNormalize(MaxPool2D_B(softmax(Q K^T / sqrt(d))))          # [n, n], Q/K after RoPE
    loss = 10 * sum_layers KL(gt || softmax(gate_logits))               # KLDivLoss, 'mean' reduction

The model is frozen and only the gates train; there is no language-modelling loss. Because the gate
pools Q and K without parameters, the teacher pass runs once: it stores each layer's pooled Q/K and
its ``gt``, and training then touches only those small tensors (exactly the same gradients as
re-running the model every step, since the model does not change).

Deviations: the official code drops the first quarter of block rows from the loss for stability in
causal models (early rows see few blocks); we do that for causal models and keep all rows for a
bidirectional encoder, where every row sees all blocks (``drop_first_frac=None`` picks this).
The paper trains 500 steps at lr 1e-3 with 20 warm-up steps and a cosine schedule on batches of 16
64k-token sequences; the CPU run uses full-batch Adam on a dozen 512-token windows with the same
schedule shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from companion.core.timing import limit_threads
from companion.core.validation import ParameterError, check_float, check_int
from companion.models.attention import attention_session, dense_attention
from companion.seer_attention.gate import GateSet, gate_logits
from companion.seer_attention.ops import block_mass_map, pooled_attention_map

LOSS_SCALE = 10.0  # the official code multiplies the summed per-layer KL by 10


@dataclass
class TeacherData:
    """Per-layer pooled Q/K (the gate's inputs), ground truth ``gt`` and, optionally, the attention
    mass map, for a set of sequences. Lists are indexed by layer; tensors are ``[S, H, n, ...]``."""

    qp: list = field(default_factory=list)
    kp: list = field(default_factory=list)
    gt: list = field(default_factory=list)
    mass: list = field(default_factory=list)
    qkv: dict = field(default_factory=dict)  # optional raw (layer -> (q, k, v)) of one sequence
    block_size: int = 0
    causal: bool = False

    def to(self, device) -> "TeacherData":
        """A copy with every tensor on ``device``."""
        mv = lambda xs: [x.to(device) for x in xs]  # noqa: E731
        return TeacherData(mv(self.qp), mv(self.kp), mv(self.gt), mv(self.mass), dict(self.qkv), self.block_size, self.causal)

    @property
    def num_layers(self) -> int:
        return len(self.gt)

    @property
    def num_sequences(self) -> int:
        return self.gt[0].shape[0] if self.gt else 0


def collect_teacher(
    model,
    gates: GateSet,
    input_ids: torch.Tensor,
    *,
    batch_size: int = 4,
    with_mass: bool = False,
    keep_qkv_of: int | None = None,
    impl: str = "auto",
) -> TeacherData:
    """Run the frozen ``model`` once over ``input_ids [S, N]`` and record what distillation needs.

    ``with_mass`` also stores the attention-mass map (for recall); ``keep_qkv_of=i`` keeps the raw
    Q, K, V (after RoPE) of sequence ``i`` for the explorer's per-head output check.
    """
    check_int("batch_size", batch_size, lo=1)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [sequences, tokens], got shape {tuple(input_ids.shape)}")
    L, B = len(gates), gates.block_size
    data = TeacherData(qp=[[] for _ in range(L)], kp=[[] for _ in range(L)], gt=[[] for _ in range(L)],
                       mass=[[] for _ in range(L)], block_size=B, causal=gates.causal)
    offset = [0]

    def handler(*, layer, q_pre, k_pre, q, k, v, causal, scaling, position_offset):
        if layer >= L:
            raise ValueError(f"the model has more attention layers than the gate set ({L})")
        if causal != gates.causal:
            raise ValueError(f"the gates are {'causal' if gates.causal else 'bidirectional'} but the model's attention is not")
        g = gates[layer]
        qp, kp = g.pool(q_pre, k_pre)
        data.qp[layer].append(qp)
        data.kp[layer].append(kp)
        data.gt[layer].append(pooled_attention_map(q, k, block_size=B, causal=causal, sm_scale=scaling, impl=impl).float())
        if with_mass:
            data.mass[layer].append(block_mass_map(q, k, block_size=B, causal=causal, sm_scale=scaling))
        if keep_qkv_of is not None and offset[0] <= keep_qkv_of < offset[0] + q.shape[0]:
            i = keep_qkv_of - offset[0]
            data.qkv[layer] = (q[i].detach().cpu(), k[i].detach().cpu(), v[i].detach().cpu(), float(scaling))
        return dense_attention(q, k, v, causal, scaling)

    device = next(model.parameters()).device
    with torch.no_grad(), attention_session(model, handler):
        for s in range(0, input_ids.shape[0], batch_size):
            offset[0] = s
            model(input_ids=input_ids[s:s + batch_size].to(device))
    for name in ("qp", "kp", "gt", "mass"):
        lists = getattr(data, name)
        setattr(data, name, [torch.cat(x) for x in lists] if lists and lists[0] else [])
    if len(data.gt) != L or any(x is None for x in data.gt):
        raise ValueError("the model ran fewer attention layers than the gate set has gates")
    return data


def kl_rows(gt: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``KL(gt || softmax(logits))`` of every row ``[..., n_q]`` (nats). Entries with ``gt == 0``
    contribute 0 (masked logits may be ``-inf``)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    pos = gt > 0
    terms = torch.where(pos, gt * (torch.log(gt.clamp_min(1e-30)) - logp.clamp_min(-1e4)), torch.zeros_like(gt))
    return terms.sum(-1)


def _rows_kept(n: int, drop_first_frac: float) -> slice:
    return slice(int(n * drop_first_frac), None)


def _stacked(data: TeacherData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All layers side by side along the head axis (the gates of different layers are independent)."""
    return torch.cat(data.qp, dim=1), torch.cat(data.kp, dim=1), torch.cat(data.gt, dim=1)


def _stacked_loss(gates: GateSet, qp, kp, gt, drop_first_frac: float) -> torch.Tensor:
    g0 = gates[0]
    w_q = torch.cat([g.w_q for g in gates.gates])
    w_k = torch.cat([g.w_k for g in gates.gates])
    logits = gate_logits(qp, kp, w_q, w_k, block_size=g0.block_size, causal=g0.causal, rope_theta=g0.rope_theta)
    rows = _rows_kept(gt.shape[-2], drop_first_frac)
    kl = kl_rows(gt[..., rows, :], logits[..., rows, :])
    # sum over layers of the per-layer 'mean' KLDivLoss == L * mean over all layers (equal sizes)
    return LOSS_SCALE * len(gates) * kl.sum() / (kl.numel() * gt.shape[-1])


def distill_loss(gates: GateSet, data: TeacherData, idx: torch.Tensor | None = None, drop_first_frac: float = 0.0) -> torch.Tensor:
    """``10 * sum_layers mean_elements KL`` (the official 'mean'-reduction KLDivLoss) on sequences ``idx``."""
    qp, kp, gt = _stacked(data)
    if idx is not None:
        qp, kp, gt = qp[idx], kp[idx], gt[idx]
    return _stacked_loss(gates, qp, kp, gt, drop_first_frac)


def heldout_kl(gates: GateSet, data: TeacherData) -> list[float]:
    """Mean per-row ``KL(gt || gate)`` in nats for every layer (all rows)."""
    out = []
    with torch.no_grad():
        for layer in range(len(gates)):
            logits = gates[layer].logits_from_pooled(data.qp[layer], data.kp[layer])
            out.append(float(kl_rows(data.gt[layer], logits).mean()))
    return out


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up then cosine decay to 0 (the official schedule)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def distill(
    gates: GateSet,
    data: TeacherData,
    *,
    steps: int = 200,
    lr: float = 1e-3,
    warmup: int = 20,
    batch_size: int | None = None,
    drop_first_frac: float | None = None,
    eval_data: TeacherData | None = None,
    eval_every: int = 10,
    seed: int = 0,
) -> dict:
    """Train ``gates`` in place on ``data`` with Adam; return the loss history.

    ``batch_size=None`` uses every sequence each step; ``drop_first_frac=None`` is 0.25 for causal
    gates (official) and 0 for bidirectional ones. Returns ``{"step", "loss", "eval_step", "eval_kl"}``
    (``eval_kl``: mean per-row held-out KL over layers, when ``eval_data`` is given).
    """
    check_int("steps", steps, lo=1)
    check_float("lr", lr, lo=0, lo_open=True)
    check_int("warmup", warmup, lo=0)
    if drop_first_frac is None:
        drop_first_frac = 0.25 if gates.causal else 0.0
    check_float("drop_first_frac", drop_first_frac, lo=0, hi=1, hi_open=True)
    S = data.num_sequences
    if batch_size is not None:
        check_int("batch_size", batch_size, lo=1, hi=S)
    if data.block_size != gates.block_size or data.num_layers != len(gates):
        raise ParameterError("data", f"{data.num_layers} layers, block {data.block_size}",
                             f"teacher data for {len(gates)} layers with block size {gates.block_size}")
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in gates.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    hist = {"step": [], "loss": [], "eval_step": [], "eval_kl": []}
    device = gates[0].w_q.device
    qp_all, kp_all, gt_all = (x.to(device) for x in _stacked(data))
    gates.train()
    with limit_threads(1):  # many tiny ops: on a CPU one thread beats several (GPU runs are unaffected)
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, steps, lr, warmup)
            if batch_size is None:
                qp, kp, gt = qp_all, kp_all, gt_all
            else:
                idx = torch.randperm(S, generator=gen)[:batch_size].to(device)
                qp, kp, gt = qp_all[idx], kp_all[idx], gt_all[idx]
            loss = _stacked_loss(gates, qp, kp, gt, drop_first_frac)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist["step"].append(step)
            hist["loss"].append(float(loss.detach()))
            if eval_data is not None and (step % eval_every == 0 or step == steps - 1):
                hist["eval_step"].append(step)
                hist["eval_kl"].append(float(sum(heldout_kl(gates, eval_data)) / len(gates)))
    gates.eval()
    return hist
