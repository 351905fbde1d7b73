"""Multi-view decomposition: one shared GNN encoder, M sub-networks realised as M prediction heads.

* Encoder (any MPNN or Graph Transformer, paper §3): ``"gcn"`` (``GCNConv`` + ReLU), ``"gin"`` (the G-MIMO
  code's layer: ``GINConv(MLP(Linear, ReLU, Linear, ReLU, BatchNorm), train_eps=True)``) or ``"gps"``
  (``GPSConv`` with a GIN local layer and 4-head global attention, after a linear input map).
* Views (reconstructed): ``View_k = E_kᵀ H^{(L)}_mix`` and ``View_mix = H^{(L)}_mix`` with **mean pooling**:
  :meth:`MultiHeadGNN.view_logits` pools the node rows each owner k holds (``E_k``) and the whole graph.
* Dual-output head: a 3-layer MLP ``Linear(h, h) → ReLU → Dropout → Linear(h, h) → ReLU → Linear(h, M·C)``
  giving ``[ŷ¹, …, ŷᴹ]`` (M = 2 in the paper: 2C outputs).
* Inference (:meth:`MultiHeadGNN.predict`): one plain forward pass, the heads averaged — over
  probabilities (``average="prob"``, default) or logits (``"logit"``); the paper does not say which.
* G-MIMO shapes: ``first_convs=M`` gives the ``mimo`` shape (M first-layer convolutions, one per input
  stream, shared middle, M heads; inference runs the test graph through each first convolution, M
  passes); ``first_convs=1`` is ``mhead`` (shared encoder + M heads, GMV's inference shape).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, GINConv, GPSConv, global_mean_pool

from companion.core import ParameterError, check_choice, check_float, check_int

CONVS = ("gcn", "gin", "gps")
AVERAGES = ("prob", "logit")


def _gin_mlp(d_in, h):
    return nn.Sequential(nn.Linear(d_in, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.BatchNorm1d(h))


def _conv(kind: str, d_in: int, h: int):
    if kind == "gcn":
        return GCNConv(d_in, h)
    if kind == "gin":
        return GINConv(_gin_mlp(d_in, h), train_eps=True)
    return GPSConv(h, GINConv(_gin_mlp(h, h), train_eps=True), heads=4, attn_type="multihead")


def mean_pool_groups(h: torch.Tensor, group: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of the rows of ``h`` in each group (zeros for an empty group) and the groups' sizes."""
    out = torch.zeros(n_groups, h.shape[1], dtype=h.dtype, device=h.device).index_add_(0, group, h)
    cnt = torch.zeros(n_groups, dtype=h.dtype, device=h.device).index_add_(0, group, torch.ones_like(group, dtype=h.dtype))
    return out / cnt.clamp(min=1)[:, None], cnt


class MultiHeadGNN(nn.Module):
    """Shared encoder + a head with ``heads`` × ``n_classes`` outputs (see the module docstring)."""

    def __init__(self, in_dim: int, n_classes: int, *, heads: int = 2, hidden: int = 64, layers: int = 3,
                 conv: str = "gcn", dropout: float = 0.5, first_convs: int = 1):
        super().__init__()
        check_int("in_dim", in_dim, lo=1)
        check_int("n_classes", n_classes, lo=2)
        check_int("heads", heads, lo=1)
        check_int("hidden", hidden, lo=2)
        check_int("layers", layers, lo=1)
        check_choice("conv", conv, CONVS)
        check_float("dropout", dropout, lo=0.0, hi=1.0, hi_open=True)
        check_int("first_convs", first_convs, lo=1)
        if first_convs not in (1, heads):
            raise ParameterError("first_convs", first_convs, f"1 (mhead) or heads = {heads} (mimo)")
        if conv == "gps" and hidden % 4:
            raise ParameterError("hidden", hidden, "a multiple of 4 for GraphGPS (4 attention heads)")
        self.heads, self.n_classes, self.conv_kind = heads, n_classes, conv
        d0 = hidden if conv == "gps" else in_dim
        self.lin_in = nn.Linear(in_dim, hidden) if conv == "gps" else None
        self.first = nn.ModuleList(_conv(conv, d0, hidden) for _ in range(first_convs))
        self.convs = nn.ModuleList(_conv(conv, hidden, hidden) for _ in range(layers - 1))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, heads * n_classes))

    def _layer(self, conv, x, edge_index, batch):
        if self.conv_kind == "gps":
            return conv(x, edge_index, batch)
        return F.relu(conv(x, edge_index))

    def embed(self, x, edge_index, batch, stream: torch.Tensor | None = None, first: int | None = None):
        """``H^{(L)}``; ``stream`` (per node) picks the first convolution in the mimo shape, ``first`` fixes it."""
        if self.lin_in is not None:
            x = self.lin_in(x)
        if len(self.first) == 1 or (stream is None and first is None):
            h = self._layer(self.first[0 if first is None else first], x, edge_index, batch)
        elif first is not None:
            h = self._layer(self.first[first], x, edge_index, batch)
        else:
            outs = torch.stack([self._layer(c, x, edge_index, batch) for c in self.first])
            h = outs.gather(0, stream.view(1, -1, 1).expand(1, -1, outs.shape[-1]))[0]
        for conv in self.convs:
            h = self._layer(conv, h, edge_index, batch)
        return h

    def head_logits(self, pooled: torch.Tensor) -> torch.Tensor:
        """``(B, M, C)`` logits of every head for pooled graph vectors ``(B, h)``."""
        return self.head(pooled).view(-1, self.heads, self.n_classes)

    def forward(self, data, first: int | None = None) -> torch.Tensor:
        """Every head's logits ``(B, M, C)`` on plain graphs (mean pooling over all nodes)."""
        h = self.embed(data.x, data.edge_index, data.batch, first=first)
        return self.head_logits(global_mean_pool(h, data.batch, size=data.num_graphs))

    def view_logits(self, data, stream: torch.Tensor | None = None):
        """On mixed views (``data.owner`` per node): ``(logits_mix (B, M, C), logits_view (B, M, C), present (B, M))``
        where ``logits_view[:, k]`` is head k on ``View_k = E_kᵀ H`` and ``present`` marks non-empty views.
        A one-head model (the "mixed views only" ablation) returns ``(logits_mix, None, None)``."""
        m, b = self.heads, data.num_graphs
        h = self.embed(data.x, data.edge_index, data.batch, stream=stream)
        mix = self.head_logits(global_mean_pool(h, data.batch, size=b))
        if m == 1:
            return mix, None, None
        pooled, cnt = mean_pool_groups(h, data.batch * m + data.owner, b * m)
        per_view = self.head_logits(pooled).view(b, m, m, self.n_classes)
        idx = torch.arange(m, device=h.device)
        return mix, per_view[:, idx, idx], (cnt.view(b, m) > 0)

    @torch.no_grad()
    def head_probs(self, data) -> torch.Tensor:
        """``(B, M, C)`` probabilities of every head, one plain forward pass (mimo shape: M passes)."""
        if len(self.first) == 1:
            return self(data).softmax(-1)
        return torch.stack([self(data, first=k)[:, k] for k in range(self.heads)], dim=1).softmax(-1)

    @torch.no_grad()
    def predict(self, data, average: str = "prob") -> torch.Tensor:
        """Class probabilities ``(B, C)``: the mean of the heads' probabilities, or softmax of their mean logit."""
        check_choice("average", average, AVERAGES)
        if len(self.first) == 1:
            logits = self(data)
        else:
            logits = torch.stack([self(data, first=k)[:, k] for k in range(self.heads)], dim=1)
        if average == "prob":
            return logits.softmax(-1).mean(1)
        return logits.mean(1).softmax(-1)


def gmv_loss(mix: torch.Tensor, view: torch.Tensor, present: torch.Tensor, y_heads: torch.Tensor,
             w_heads: torch.Tensor, alpha: float) -> torch.Tensor:
    """``ℓ = ℓ_mix + α·ℓ_view`` (weight decay R(θ) is the optimiser's), averaged over the batch:

    ``ℓ_mix = Σ_k w_k · CE(ŷᵏ_mix, y_k)`` (Eq. 2 weights) and ``ℓ_view = Σ_k CE(ŷᵏ_{View_k}, y_k)`` over
    non-empty views. For M = 2: ``w_src CE(ŷ¹_mix, y_src) + w_trg CE(ŷ²_mix, y_trg) + α (CE(ŷ¹_src, y_src) +
    CE(ŷ²_trg, y_trg))``."""
    check_float("alpha", alpha, lo=0.0)
    b, m, c = mix.shape
    ce_mix = F.cross_entropy(mix.reshape(-1, c), y_heads.reshape(-1), reduction="none").view(b, m)
    loss = (w_heads * ce_mix).sum(1).mean()
    if alpha and view is not None:
        ce_view = F.cross_entropy(view.reshape(-1, c), y_heads.reshape(-1), reduction="none").view(b, m)
        loss = loss + alpha * (ce_view * present).sum(1).mean()
    return loss


def multi_head_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The two-head (M-head) vanilla loss: ``(1/M) Σ_k CE(ŷᵏ, y)`` on plain graphs."""
    b, m, c = logits.shape
    return F.cross_entropy(logits.reshape(-1, c), y.repeat_interleave(m)).mean() if m else logits.sum()


class GraphBatch:
    """A light disjoint-union batch (what ``torch_geometric.data.Batch.from_data_list`` builds, for the fields
    this package uses: ``x``, ``edge_index``, ``y``, and optionally ``owner``, ``stream``, ``y_heads``,
    ``w_heads``, ``k``). About ten times faster to build than ``Batch`` on small graphs."""

    def __init__(self, graphs):
        graphs = list(graphs)
        if not graphs:
            raise ParameterError("graphs", graphs, "at least one graph")
        sizes = torch.tensor([g.num_nodes for g in graphs])
        offsets = torch.cumsum(sizes, 0) - sizes
        self.num_graphs = len(graphs)
        self.num_nodes = int(sizes.sum())
        self.x = torch.cat([g.x for g in graphs])
        self.edge_index = torch.cat([g.edge_index + o for g, o in zip(graphs, offsets.tolist())], dim=1)
        self.batch = torch.repeat_interleave(torch.arange(len(graphs)), sizes)
        first = graphs[0]
        for key in ("y", "y_heads", "w_heads", "k"):
            if key in first:
                setattr(self, key, torch.cat([g[key] for g in graphs]))
        for key in ("owner", "stream"):
            if key in first:
                setattr(self, key, torch.cat([g[key] for g in graphs]))

    def to(self, device):
        for key, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(self, key, value.to(device))
        return self
