"""Experiment A of paper 09 (Δ Attention): the sparse-attention shift compounds through depth.

The real pretrained all-MiniLM-L6-v2 (6 layers, 12 heads, D = 32, bidirectional) is run with *every*
layer's attention computed by one `Method` (dense / sparse / sparse + recompute / sparse + Δ), so a
layer's shifted output becomes the next layer's input: the mechanism of the paper's Sec. 3 (there on
Llama-3.1-8B at 131K tokens, here on a 512-token encoder). The model runs its own forward; the
project's one attention interception (`companion.models.attention.attention_session`) replaces each
layer's attention, so with `Method("dense")` this is `BertModel.forward` (tested). Inputs are unpadded windows of exactly N tokens
([CLS] … [SEP]) cut from one stream of real text, so no padding mask is needed.

Deviations: MiniLM is bidirectional, so masks are symmetric (see attention.py) and the dense rows of
Δ attend to all keys; the dense tail of the official code (made for decoding) is kept as a parameter.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from companion.core import check_int
from companion.delta_attention.attention import Method, compute_fraction, delta_attention
from companion.delta_attention.diagnostics import centred_ranks, cosine_rows, mean_pool_cosine, spearman_rows
from companion.models.attention import attention_layout, attention_session


def token_windows(tokenizer, texts: list[str], n_tokens: int, batch: int) -> torch.Tensor:
    """`batch` windows of exactly `n_tokens` ids ([CLS] + text + [SEP]) cut from the joined `texts`."""
    n_tokens = check_int("n_tokens", n_tokens, lo=8)
    batch = check_int("batch", batch, lo=1)
    body = n_tokens - 2
    ids = tokenizer(" ".join(texts), add_special_tokens=False, verbose=False)["input_ids"]
    if len(ids) < body * batch:
        raise ValueError(f"the texts give {len(ids)} tokens; {batch} windows of {n_tokens} need {body * batch}; "
                         "pass more texts")
    rows = [[tokenizer.cls_token_id] + ids[i * body:(i + 1) * body] + [tokenizer.sep_token_id] for i in range(batch)]
    return torch.tensor(rows, dtype=torch.long)


@dataclass
class Trace:
    """What one forward pass under a method leaves behind (per layer l = 0 … L−1)."""

    method: Method
    attn_out: list = field(default_factory=list)   # [B, N, C] attention outputs (before W_O)
    hidden: list = field(default_factory=list)     # [B, N, C] layer outputs
    q_last: list = field(default_factory=list)     # [B, H, R, D] queries of the last R rows
    k: list = field(default_factory=list)          # [B, H, N, D] keys
    qkv: list = field(default_factory=list)        # (q, k, v, scaling) per layer, kept by the dense run only
    ranks: dict = field(default_factory=dict, repr=False)   # layer -> centred ranks of its dense decode rows (memo)

    def decode_ranks(self, layer: int):
        """:func:`~companion.delta_attention.diagnostics.centred_ranks` of this run's dense decode rows at ``layer``,
        computed once: the dense run is the reference every method's Spearman correlation is taken against."""
        if layer not in self.ranks:
            self.ranks[layer] = centred_ranks(dense_rows_probs(self.q_last[layer], self.k[layer]))
        return self.ranks[layer]


@torch.no_grad()
def run_minilm(model, input_ids: torch.Tensor, method: Method, *, last_rows: int = 32) -> Trace:
    """Forward `input_ids` [B, N] through the BertModel with every layer's attention under `method`.

    The model runs its own forward; the project's one attention interception
    (:func:`companion.models.attention.attention_session`) hands every layer's Q, K, V to
    `delta_attention` and records what the trace needs; the layer outputs are the model's hidden states.
    """
    layout = attention_layout(model)
    if layout.num_kv_heads != layout.num_heads:
        raise ValueError(f"run_minilm expects one K/V head per query head, got {layout.num_kv_heads} of {layout.num_heads}")
    trace = Trace(method=method)

    def handler(*, layer, q, k, v, scaling, **_):
        out = delta_attention(q, k, v, method, sm_scale=scaling)
        b, h, n, d = out.shape
        trace.attn_out.append(out.transpose(1, 2).reshape(b, n, h * d))
        trace.q_last.append(q[:, :, -last_rows:].clone())
        trace.k.append(k.clone())
        if method.mode == "dense":   # the dense model's inputs of every layer, for the isolated error in `compare`
            trace.qkv.append((q.clone(), trace.k[-1], v.clone(), scaling))
        return out

    with attention_session(model, handler):
        res = model(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids), output_hidden_states=True)
    trace.hidden = list(res.hidden_states[1:])
    return trace


def dense_rows_probs(q_last: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dense softmax attention rows of the last queries (what a dense decode step would see)."""
    scale = q_last.shape[-1] ** -0.5
    return torch.softmax(torch.matmul(q_last, k.transpose(-1, -2)) * scale, dim=-1)


def isolated_cosines(method: Method, dense: Trace) -> list[torch.Tensor]:
    """Per layer, the cosine to the dense attention output of `method` applied to the *dense* model's Q, K, V of
    that layer ([B, N]): the layer's own error, without the shift of the layers below. The gap between it and the
    propagated run's cosine is what compounds through depth."""
    if not dense.qkv:
        raise ValueError("the dense trace keeps no Q/K/V: make it with run_minilm(..., Method('dense', ...))")
    out = []
    with torch.no_grad():
        for (q, k, v, scaling), ad in zip(dense.qkv, dense.attn_out):
            o = delta_attention(q, k, v, method, sm_scale=scaling)
            b, h, n, d = o.shape
            out.append(cosine_rows(o.transpose(1, 2).reshape(b, n, h * d), ad))
    return out


def compare(trace: Trace, dense: Trace) -> pd.DataFrame:
    """Per-layer diagnostics of `trace` against the dense run: one row per layer (batch means, and the two
    cosines per text window in ``cos_attn_windows`` / ``final_cos_windows``). ``cos_attn_isolated`` is the same
    layer's cosine on the dense model's inputs (:func:`isolated_cosines`, per window in
    ``cos_attn_isolated_windows``): ``cos_attn`` below it is the shift the layers below added."""
    rows = []
    n = dense.k[0].shape[2]
    frac = compute_fraction(n, trace.method)
    finals = mean_pool_cosine(trace.hidden[-1], dense.hidden[-1])   # [B]
    final = float(finals.mean())
    isolated = isolated_cosines(trace.method, dense)
    for layer, (ao, ad) in enumerate(zip(trace.attn_out, dense.attn_out)):
        cos_rows = cosine_rows(ao, ad)   # [B, N]
        cos_attn = float(cos_rows.mean())
        cos_hidden = float(cosine_rows(trace.hidden[layer], dense.hidden[layer]).mean())
        rho = spearman_rows(dense_rows_probs(trace.q_last[layer], trace.k[layer]), q_ranks=dense.decode_ranks(layer))
        rows.append({
            "method": trace.method.label(), "mode": trace.method.mode, "sink": trace.method.sink,
            "window": trace.method.window, "gamma": trace.method.gamma if trace.method.mode in ("recompute", "delta") else np.nan,
            "layer": layer + 1, "cos_attn": cos_attn, "cos_hidden": cos_hidden,
            "spearman": float(rho.mean()), "final_cos": final, "compute_fraction": frac,
            # per text window (the repeats a claim is judged on): the same two cosines, one value per window
            "cos_attn_windows": tuple(float(c) for c in cos_rows.mean(dim=1)),
            "final_cos_windows": tuple(float(c) for c in finals),
            "cos_attn_isolated": float(isolated[layer].mean()),
            "cos_attn_isolated_windows": tuple(float(c) for c in isolated[layer].mean(dim=1)),
        })
    return pd.DataFrame(rows)


def position_error(trace: Trace, dense: Trace) -> np.ndarray:
    """1 − cosine of the attention outputs per layer and position, averaged over the batch: [L, N]."""
    return np.stack([(1 - cosine_rows(ao, ad)).clamp_min(0).mean(0).numpy() for ao, ad in zip(trace.attn_out, dense.attn_out)])


class MiniLMRuns:
    """`run_minilm` on one model and input, memoised per method (the `keep` most recent traces), so the
    explorer's first view and the Reproduce sweep share the passes they both need."""

    def __init__(self, model, input_ids: torch.Tensor, *, last_rows: int = 32, causal: bool = False, keep: int = 4):
        self.model, self.input_ids, self.last_rows = model, input_ids, check_int("last_rows", last_rows, lo=1)
        self.keep = check_int("keep", keep, lo=0)
        self._traces: OrderedDict = OrderedDict()
        self.dense = run_minilm(model, input_ids, Method("dense", causal=causal), last_rows=last_rows)

    def get(self, method: Method) -> Trace:
        if method.mode == "dense" and method.causal == self.dense.method.causal:
            return self.dense
        if method in self._traces:
            self._traces.move_to_end(method)
            return self._traces[method]
        trace = run_minilm(self.model, self.input_ids, method, last_rows=self.last_rows)
        if self.keep:
            self._traces[method] = trace
            while len(self._traces) > self.keep:
                self._traces.popitem(last=False)
        return trace


def shift_through_depth(model, input_ids: torch.Tensor, methods: list[Method], *, last_rows: int = 32,
                        dense: Trace | None = None, runs: MiniLMRuns | None = None) -> pd.DataFrame:
    """Experiment A: run every method, compare each with the dense run, one table (rows = method × layer).
    With `runs` (a `MiniLMRuns` of the same model, input and `last_rows`) its traces are reused."""
    if runs is not None:
        dense, get = runs.dense, runs.get
    else:
        causal = methods[0].causal if methods else False
        dense = dense or run_minilm(model, input_ids, Method("dense", causal=causal), last_rows=last_rows)

        def get(m):
            return run_minilm(model, input_ids, m, last_rows=last_rows)
    frames = [compare(get(m), dense) for m in methods]
    return pd.concat(frames, ignore_index=True)
