"""Experiments for paper 04 (ZeroS): baselines, property measurements, the expressivity toy and an
MQAR-style associative-recall comparison, all small enough for a 2-core CPU.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025.

* Properties (Sec. 3): rows of ``r`` sum to zero; ``max_i |r_{t,i}| = O(1/t)`` and ``||o_t||`` stays
  bounded as t grows (Lemma 3.4) when the logits are bounded; the global-max stabiliser of the
  official scan underflows where logits rise, the running max does not; standard RoPE is
  relative-position invariant, the repository's tables are not.
* Expressivity (Prop. 3.1 / Cor. 3.2): one layer, one head must output ``v_a - v_b`` for two marked
  positions. Softmax weights are convex, so one softmax layer cannot subtract; ZeroS can.
  Our task design (the paper states the claim, not a training protocol): content vectors plus
  marker channels, target read at the last position, no per-head LayerNorm and no RoPE in either
  model so that only the mixing weights differ.
* MQAR-style recall (the paper uses Zoology's MQAR at larger scale): key-value pairs then queries;
  softmax vs linear attention (1 + elu, normalised) vs ZeroS, reported as measured.

Baselines here are ours: :class:`SoftmaxAttention` (PyTorch SDPA with the same projections and
RoPE as the ZeroS layer) and :class:`LinearAttention` (Katharopoulos et al. 2020).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.core.validation import check_int
from companion.zeros_attention import functional as Fz
from companion.zeros_attention.layer import ZeroSAttention

__all__ = [
    "SoftmaxAttention",
    "LinearAttention",
    "make_mixer",
    "MIXERS",
    "zeros_row",
    "decay_profile",
    "output_norms",
    "underflow_demo",
    "make_difference_task",
    "train_difference",
    "make_mqar",
    "TinyLM",
    "train_mqar",
]

MIXERS = ("softmax", "linear", "zeros", "zeros_sm")


# ----------------------------------------------------------------------------------------------
# Baseline mixers
# ----------------------------------------------------------------------------------------------
class SoftmaxAttention(nn.Module):
    """Standard multi-head softmax attention (SDPA), optional RoPE, same projection sizes as ZeroS."""

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = True, rope: str = "standard", bias: bool = True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.D, self.H, self.d = d_model, n_heads, d_model // n_heads
        if rope != "none" and self.d % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {self.d}")
        self.causal, self.rope = causal, rope
        self.q, self.k, self.v = (nn.Linear(d_model, d_model, bias=bias) for _ in range(3))
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _qkv(self, x):
        B, T, _ = x.shape
        q, k, v = (m(x).view(B, T, self.H, self.d) for m in (self.q, self.k, self.v))
        if self.rope != "none":
            cos, sin = Fz.rope_cos_sin(T, self.d, layout=self.rope, device=x.device, dtype=x.dtype)
            q, k = Fz.apply_rope(q, cos, sin), Fz.apply_rope(k, cos, sin)
        return q, k, v

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self._qkv(x)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=self.causal)
        return self.out_proj(o.transpose(1, 2).reshape(B, T, self.D))

    @torch.no_grad()
    def attention_weights(self, x):
        q, k, _ = self._qkv(x)
        S = torch.einsum("bthd,bihd->bhti", q, k) / math.sqrt(self.d)
        if self.causal:
            T = x.shape[1]
            S = S.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), float("-inf"))
        return torch.softmax(S, dim=-1)


class LinearAttention(nn.Module):
    """Normalised linear attention with feature map ``phi = 1 + elu`` (convex weights, no positions)."""

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = True, bias: bool = True, eps: float = 1e-6):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.D, self.H, self.d = d_model, n_heads, d_model // n_heads
        self.causal, self.eps = causal, eps
        self.q, self.k, self.v = (nn.Linear(d_model, d_model, bias=bias) for _ in range(3))
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (m(x).view(B, T, self.H, self.d) for m in (self.q, self.k, self.v))
        q, k = F.elu(q) + 1.0, F.elu(k) + 1.0
        A = torch.einsum("bthd,bihd->bhti", q, k)
        if self.causal:
            A = A * torch.ones(T, T, device=x.device, dtype=x.dtype).tril()
        A = A / (A.sum(-1, keepdim=True) + self.eps)
        o = torch.einsum("bhti,bihe->bthe", A, v)
        return self.out_proj(o.reshape(B, T, self.D))


def make_mixer(kind: str, d_model: int, n_heads: int, **kw) -> nn.Module:
    """One token mixer by name: "softmax", "linear", "zeros" or "zeros_sm"."""
    if kind not in MIXERS:
        raise ValueError(f"mixer kind must be one of {MIXERS}, got {kind!r}")
    if kind == "softmax":
        return SoftmaxAttention(d_model, n_heads, causal=kw.get("causal", True), rope=kw.get("rope", "standard"))
    if kind == "linear":
        return LinearAttention(d_model, n_heads, causal=kw.get("causal", True))
    return ZeroSAttention(d_model, n_heads, variant="zeros" if kind == "zeros" else "zeros_sm", **kw)


# ----------------------------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------------------------
def zeros_row(s_prefix: torch.Tensor, sigma1: float, sigmah: float) -> torch.Tensor:
    """One row ``r_{t, 1..t}`` of the ZeroS weights from the logits ``s_1..s_t`` (1-D)."""
    t = s_prefix.numel()
    p = torch.softmax(s_prefix, dim=0)
    delta = s_prefix - s_prefix.mean()
    return sigma1 * delta / t + sigmah * (p - 1.0 / t - delta / t)


def decay_profile(T: int = 4096, *, bound: float = 2.0, sigma1: float = 0.7, sigmah: float = 0.5,
                  n_points: int = 25, seed: int = 0) -> dict:
    """``max_i |r_{t,i}|``, ``sum_i |r_{t,i}|`` and ``|sum_i r_{t,i}|`` at log-spaced t for bounded logits.

    Logits uniform in ``[-bound, bound]`` (float64). Lemma 3.4's premise is bounded logits; then
    ``t * max|r|`` stays bounded (weights are O(1/t)) and the l1 mass of a row stays O(1).
    """
    g = torch.Generator().manual_seed(seed)
    s = (torch.rand(T, generator=g, dtype=torch.float64) * 2 - 1) * bound
    ts = sorted({int(round(x)) for x in torch.logspace(0, math.log10(T), n_points).tolist()})
    out = {"t": [], "max_abs": [], "l1": [], "row_sum": []}
    for t in ts:
        r = zeros_row(s[:t], sigma1, sigmah)
        out["t"].append(t)
        out["max_abs"].append(r.abs().max().item())
        out["l1"].append(r.abs().sum().item())
        out["row_sum"].append(abs(r.sum().item()))
    return out


@torch.no_grad()
def output_norms(T: int = 4096, *, d: int = 16, seed: int = 0, chunk_size: int = 256) -> dict:
    """``||o_t||`` for ZeroS (chunked form) vs un-normalised and normalised linear attention.

    Random unit q, k, standard-normal v, logits from the deviation rule on random ``u``, gates 0.5.
    ZeroS stays O(1); the un-normalised sum grows like sqrt(t); the normalised (convex) average of
    random values shrinks towards their mean (the "dilution" the paper attributes to 1/t).
    """
    g = torch.Generator().manual_seed(seed)
    B, H = 1, 1
    q = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, d, generator=g, dtype=torch.float64)
    u = torch.randn(B, T, H, d, generator=g, dtype=torch.float64)
    s = Fz.step_logits(u, kind="deviation")
    half = torch.full((B, T, H), 0.5, dtype=torch.float64)
    o = Fz.zeros_chunked(q, k, v, s, half, half, chunk_size=chunk_size)
    qf, kf = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("bthd,bthe->bthde", kf, v).cumsum(1)
    num = torch.einsum("bthd,bthde->bthe", qf, kv)
    den = torch.einsum("bthd,bthd->bth", qf, kf.cumsum(1))[..., None]
    t = torch.arange(1, T + 1)
    return {
        "t": t.tolist(),
        "zeros": o[0, :, 0].norm(dim=-1).tolist(),
        "linear_unnormalised": num[0, :, 0].norm(dim=-1).tolist(),
        "linear_normalised": (num / den)[0, :, 0].norm(dim=-1).tolist(),
    }


@torch.no_grad()
def underflow_demo(T: int = 1024, *, slope: float = 0.25, d: int = 16, seed: int = 0, dtype=torch.float32) -> dict:
    """Rising logits ``s_i = slope * i + noise``: official global-max scan vs running-max chunked form.

    Both are compared with the exact float64 result. With the global max, ``e^{s_i - max}`` of early
    steps underflows to 0 in float32 once ``max - s_i`` exceeds ~104, so early rows lose their
    higher-order part (``alpha_t F_t = 0 / (0 + 1e-12)``); the running max keeps every row exact.
    """
    g = torch.Generator().manual_seed(seed)
    B, H = 1, 1
    q = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, H, d, generator=g, dtype=torch.float64)
    s = slope * torch.arange(T, dtype=torch.float64).view(1, T, 1) + 0.5 * torch.randn(B, T, H, generator=g, dtype=torch.float64)
    s1 = torch.full((B, T, H), 0.3, dtype=torch.float64)
    sh = torch.full((B, T, H), 0.9, dtype=torch.float64)
    exact = Fz.zeros_chunked(q, k, v, s, s1, sh, chunk_size=64)
    lo = [x.to(dtype) for x in (q, k, v, s, s1, sh)]
    glob = Fz.zeros_scan(*lo, stabilizer="global").double()
    run = Fz.zeros_chunked(*lo, chunk_size=64).double()
    scale = exact.norm(dim=-1).clamp_min(1e-12)
    err_g = ((glob - exact).norm(dim=-1) / scale)[0, :, 0]
    err_r = ((run - exact).norm(dim=-1) / scale)[0, :, 0]
    gap = (s.max() - s)[0, :, 0]
    return {
        "t": list(range(1, T + 1)),
        "gap_to_global_max": gap.tolist(),
        "rel_err_global": err_g.tolist(),
        "rel_err_running": err_r.tolist(),
        "max_rel_err_global": err_g.max().item(),
        "max_rel_err_running": err_r.max().item(),
        "rows_broken_global": int((err_g > 1e-3).sum()),
        "rows_broken_running": int((err_r > 1e-3).sum()),
    }


# ----------------------------------------------------------------------------------------------
# Expressivity toy: output v_a - v_b
# ----------------------------------------------------------------------------------------------
def make_difference_task(n: int, *, T: int = 32, d: int = 32, seed: int = 0):
    """Sequences of ``T`` tokens of width ``d``: ``d - 4`` content channels + markers (a, b, query, 1).

    Two distinct positions a, b < T-1 are marked; the last token is the query (content 0). The target
    is ``c_a - c_b`` (content vectors, standard normal), read at the last position.
    """
    if d < 6:
        raise ValueError(f"d must be >= 6 (content + 4 marker channels), got {d}")
    g = torch.Generator().manual_seed(seed)
    dc = d - 4
    c = torch.randn(n, T, dc, generator=g)
    c[:, -1] = 0.0
    idx = torch.stack([torch.randperm(T - 1, generator=g)[:2] for _ in range(n)])
    x = torch.zeros(n, T, d)
    x[..., :dc] = c
    rows = torch.arange(n)
    x[rows, idx[:, 0], dc] = 1.0
    x[rows, idx[:, 1], dc + 1] = 1.0
    x[:, -1, dc + 2] = 1.0
    x[..., dc + 3] = 1.0
    y = c[rows, idx[:, 0]] - c[rows, idx[:, 1]]
    return x, y


class _OneLayer(nn.Module):
    def __init__(self, kind: str, d: int, d_out: int):
        super().__init__()
        kw = {"rope": "none"}
        if kind in ("zeros", "zeros_sm"):
            kw.update(use_norm=False, impl="explicit")
        self.mixer = make_mixer(kind, d, 1, **kw)
        self.readout = nn.Linear(d, d_out)

    def forward(self, x):
        return self.readout(self.mixer(x)[:, -1])


def train_difference(kind: str, *, steps: int = 300, n_train: int = 2048, n_test: int = 512, T: int = 32,
                     d: int = 32, batch: int = 128, lr: float = 1e-2, seed: int = 0, device="cpu") -> dict:
    """Train one layer, one head (``kind`` in MIXERS) on the difference task; normalised test MSE.

    Returns ``{"curve": [...], "test_nmse": float, "model": module}``; NMSE = MSE / mean(y^2), so
    predicting 0 scores 1. Convex weights cannot subtract: weights that ignore the contents score at least
    ``claims.CONVEX_FLOOR`` (0.5); softmax's, which read them, can go lower but cannot output ``c_a - c_b`` exactly (Cor. 3.2).
    """
    torch.manual_seed(seed)
    xtr, ytr = (t.to(device) for t in make_difference_task(n_train, T=T, d=d, seed=seed))
    xte, yte = (t.to(device) for t in make_difference_task(n_test, T=T, d=d, seed=seed + 10_000))
    model = _OneLayer(kind, d, ytr.shape[-1]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    g = torch.Generator().manual_seed(seed + 1)
    curve = []
    var = ytr.pow(2).mean()
    for _ in range(steps):
        i = torch.randint(0, n_train, (batch,), generator=g).to(device)
        loss = F.mse_loss(model(xtr[i]), ytr[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        curve.append((loss / var).item())
    model.eval()
    with torch.no_grad():
        nmse = (F.mse_loss(model(xte), yte) / yte.pow(2).mean()).item()
    return {"curve": curve, "test_nmse": nmse, "model": model}


# ----------------------------------------------------------------------------------------------
# MQAR-style associative recall
# ----------------------------------------------------------------------------------------------
def make_mqar(n: int, *, T: int = 64, n_pairs: int = 8, n_keys: int = 32, n_values: int = 32, seed: int = 0):
    """Multi-query associative recall: ``k1 v1 ... kN vN`` then ``T - 2N`` queries of those keys.

    Token ids: 0 unused, keys ``1..n_keys``, values ``n_keys+1 .. n_keys+n_values``. Targets are the
    value bound to each query key at query positions and -100 (ignored) elsewhere.
    """
    if 2 * n_pairs >= T:
        raise ValueError(f"need 2 * n_pairs < T, got n_pairs={n_pairs}, T={T}")
    if n_pairs > min(n_keys, n_values):
        raise ValueError(f"n_pairs={n_pairs} exceeds the number of keys/values")
    g = torch.Generator().manual_seed(seed)
    keys = torch.stack([torch.randperm(n_keys, generator=g)[:n_pairs] for _ in range(n)]) + 1
    vals = torch.randint(0, n_values, (n, n_pairs), generator=g) + n_keys + 1
    nq = T - 2 * n_pairs
    pick = torch.randint(0, n_pairs, (n, nq), generator=g)
    x = torch.zeros(n, T, dtype=torch.long)
    x[:, 0:2 * n_pairs:2] = keys
    x[:, 1:2 * n_pairs:2] = vals
    x[:, 2 * n_pairs:] = torch.gather(keys, 1, pick)
    y = torch.full((n, T), -100, dtype=torch.long)
    y[:, 2 * n_pairs:] = torch.gather(vals, 1, pick)
    return x, y, 1 + n_keys + n_values


class TinyLM(nn.Module):
    """Pre-LN transformer: token + learned position embeddings, ``n_layers`` x (mixer, MLP), head.

    ``token_shift`` adds a learned map of the previous token's embedding to each position (the
    short convolution of H3 / Based / Mamba-style models), so that a single attention layer can
    match a query key against "the token before this value"; every mixer gets the same input.
    """

    def __init__(self, kind: str, vocab: int, *, d_model: int = 64, n_layers: int = 2, n_heads: int = 2,
                 max_len: int = 256, token_shift: bool = True, **mixer_kw):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.shift = nn.Linear(d_model, d_model, bias=False) if token_shift else None
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d_model),
                "mix": make_mixer(kind, d_model, n_heads, **mixer_kw),
                "ln2": nn.LayerNorm(d_model),
                "mlp": nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)),
            }))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids):
        T = ids.shape[1]
        e = self.emb(ids)
        h = e + self.pos[:T]
        if self.shift is not None:
            h = h + self.shift(F.pad(e, (0, 0, 1, 0))[:, :T])
        for blk in self.blocks:
            h = h + blk["mix"](blk["ln1"](h))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.head(self.ln(h))


def train_mqar(kind: str, *, steps: int = 300, n_train: int = 4096, n_test: int = 512, T: int = 64,
               n_pairs: int = 8, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, batch: int = 64,
               lr: float = 3e-3, seed: int = 0, token_shift: bool = True, device="cpu", **mixer_kw) -> dict:
    """Train a :class:`TinyLM` with mixer ``kind`` on MQAR; test accuracy at query positions."""
    check_int("steps", steps, lo=3)  # a warm-up of two steps and one after it
    torch.manual_seed(seed)
    xtr, ytr, vocab = make_mqar(n_train, T=T, n_pairs=n_pairs, seed=seed)
    xte, yte, _ = make_mqar(n_test, T=T, n_pairs=n_pairs, seed=seed + 10_000)
    xtr, ytr, xte, yte = (t.to(device) for t in (xtr, ytr, xte, yte))
    model = TinyLM(kind, vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads, max_len=T,
                   token_shift=token_shift, **mixer_kw).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    # a 10% warm-up, at least two steps: at steps = 10 torch's OneCycleLR would end it at step 0 and divide 0 by 0
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=max(0.1, 2 / steps))
    g = torch.Generator().manual_seed(seed + 1)
    curve = []
    for _ in range(steps):
        i = torch.randint(0, n_train, (batch,), generator=g).to(device)
        logits = model(xtr[i])
        loss = F.cross_entropy(logits.reshape(-1, vocab), ytr[i].reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        curve.append(loss.item())
    model.eval()
    with torch.no_grad():
        pred = model(xte).argmax(-1)
        m = yte != -100
        acc = (pred[m] == yte[m]).float().mean().item()
    return {"curve": curve, "test_acc": acc, "n_params": sum(p.numel() for p in model.parameters())}
