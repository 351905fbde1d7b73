"""Moving a LoRA adapter from an old model to a new one (paper §3.4, Alg. 2; code ``lora_adaption.py``).

An adapter is held as ``{(layer, module): (A, B)}`` with A (r × in), B (out × r) in nn.Linear layout, so
ΔW = B A (peft's lora_A / lora_B; the scale α/r is the same before and after and is left out, as in the
code). For a mapped layer pair (old i → new m(i)) and a mapped head pair (old a → new b), with the
nn.Linear weights' per-head blocks W_Q[a] (d_h × d_o rows) and W_O[:, a] (d_o × d_h columns):

    ΔW_Q^new[b]    = (W_Q^old[a] W_h W_Q^new[b]ᵀ)ᵀ · ΔW_Q^old[a] · W_h            (same for K, V)
    ΔW_O^new[:, b] = W_hᵀ · ΔW_O^old[:, a] · (W_O^old[:, a]ᵀ W_h W_O^new[:, b])

(``form="code"``, what the official code computes). Alg. 2's whole-matrix form ``form="alg2"``,
ΔW_n = W_hᵀ ΔW_o W_oᵀ W_h W_n in the paper's x·W layout, is in nn.Linear layout

    ΔW_n = W_n W_hᵀ W_oᵀ ΔW_o W_h   (q, k, v),       ΔW_n = W_hᵀ ΔW_o W_oᵀ W_h W_n   (o, the code's O rule summed)

i.e. the same products summed over all head pairs instead of the matched ones (:func:`form_difference`
reports how far apart the two are). New heads without a partner, and new layers without a partner, get
ΔW = 0. GQA: old K/V weights and deltas are repeated to the query-head count before the transfer, and
the new K/V deltas are averaged over each group of query heads (code, Qwen2.5 / Llama-3 branch).

Then each ΔW_new is cut back to the old rank r by its SVD: B = U_r S_r^{1/2}, A = S_r^{1/2} V_rᵀ, the best
rank-r approximation (Eckart-Young: the error is √(Σ_{k>r} s_k²)). ``up_proj``/``down_proj``/``gate_proj``
adapters follow the code's rules (gate like up; the code has no gate rule):
B_up^new = W_up^new W_h⁺ W_up^{old,+} B_old, A_up^new = A_old W_h; B_down^new = W_h⁺ B_old,
A_down^new = A_old W_down^{old,+} W_h W_down^new.

**A property of these formulas** (inferred, tested): with identical old and new models (W_h = I, identity
maps) the Q/K/V rule gives ΔW[a] ↦ (W_Q[a] W_Q[a]ᵀ) ΔW[a] and the O rule ΔW[:, a] ↦ ΔW[:, a] (W_O[:, a]ᵀ W_O[:, a]):
the adapter is multiplied by each head's d_h × d_h Gram matrix instead of being returned unchanged. With
trained weights those Gram matrices are far from the identity, so the transferred adapter is mostly a
direction to start from, which is why the paper needs the lightweight fine-tuning (LFT) step after it.

Models are described by their configs (:class:`ModelSpec`): no directory-name branches, no trailing-slash
paths, no fixed layer ranges. Llama-layout decoders (``model.model.layers[i].self_attn.q_proj`` …) are
supported, which covers Llama, MiniCPM-llama-format, Qwen2/2.5, Mistral.
"""

from __future__ import annotations

import contextlib
import copy
import re
import warnings
from dataclasses import dataclass

import torch

from companion.core import ParameterError, check_choice, check_int
from companion.lorasuite.mapping import _heads_cols, _heads_rows, repeat_kv_heads

ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
MODULES = ATTN_MODULES + MLP_MODULES
FORMS = ("code", "alg2")
_GROUP = {**{m: "self_attn" for m in ATTN_MODULES}, **{m: "mlp" for m in MLP_MODULES}}
_KEY = re.compile(r"layers\.(\d+)\.(self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder read from its config (``transformers`` names)."""

    model_type: str
    hidden_act: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int

    @classmethod
    def from_config(cls, config) -> "ModelSpec":
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(model_type=config.model_type, hidden_act=str(getattr(config, "hidden_act", "?")),
                   hidden=config.hidden_size, layers=config.num_hidden_layers, heads=heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or heads, head_dim=head_dim,
                   ffn=config.intermediate_size, vocab=config.vocab_size)

    @property
    def n_rep(self) -> int:
        return self.heads // self.kv_heads


def check_compatible(old: ModelSpec, new: ModelSpec) -> None:
    """LoRASuite assumes the same architecture class and activation (paper §3) and, for the per-head rule
    and RoPE, the same head dimension."""
    if old.model_type != new.model_type:
        raise ParameterError("new model", new.model_type, f"the old model's architecture class {old.model_type!r}")
    if old.hidden_act != new.hidden_act:
        raise ParameterError("new model activation", new.hidden_act, f"the old model's activation {old.hidden_act!r}")
    if old.head_dim != new.head_dim:
        raise ParameterError("new model head_dim", new.head_dim, f"the old model's head_dim {old.head_dim}")


def _layers(model):
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(layers[0], "self_attn") or not hasattr(layers[0].self_attn, "q_proj"):
        raise ParameterError("model", type(model).__name__,
                             "a Llama-layout causal LM (model.model.layers[i].self_attn.q_proj ...)")
    return layers


def layer_weights(model, i: int) -> dict:
    """float32 copies of layer i's projection weights, keyed q, k, v, o, gate, up, down."""
    layer = _layers(model)[i]
    a, m = layer.self_attn, layer.mlp

    def w(mod):
        base = getattr(mod, "base_layer", mod)  # a peft-wrapped Linear keeps its weight in base_layer
        return base.weight.detach().float().clone()  # on the model's device

    return {"q": w(a.q_proj), "k": w(a.k_proj), "v": w(a.v_proj), "o": w(a.o_proj),
            "gate": w(m.gate_proj), "up": w(m.up_proj), "down": w(m.down_proj)}


# ------------------------------------------------------------------------------------------ adapters

def adapter_from_state(state: dict) -> dict:
    """``{(layer, module): (A, B)}`` from a peft LoRA state dict (keys ``...layers.{i}.self_attn.q_proj.lora_A.weight``)."""
    parts: dict = {}
    for key, value in state.items():
        m = _KEY.search(key)
        if m is None:
            continue
        layer, _grp, module, which = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        parts.setdefault((layer, module), {})[which] = value.detach().float().clone()
    out = {}
    for k, v in sorted(parts.items()):
        if set(v) != {"A", "B"}:
            raise ParameterError("adapter", k, "both lora_A and lora_B for every adapted module")
        out[k] = (v["A"], v["B"])
    if not out:
        raise ParameterError("adapter", "no LoRA weights", "a peft LoRA state dict with lora_A / lora_B weights")
    return out


def adapter_to_state(adapter: dict) -> dict:
    """The peft state-dict keys of an adapter (what ``PeftModel.from_pretrained`` reads)."""
    state = {}
    for (layer, module), (A, B) in sorted(adapter.items()):
        stem = f"base_model.model.model.layers.{layer}.{_GROUP[module]}.{module}"
        state[f"{stem}.lora_A.weight"] = A.contiguous()
        state[f"{stem}.lora_B.weight"] = B.contiguous()
    return state


def adapter_targets(adapter: dict) -> list[str]:
    return sorted({m for _, m in adapter}, key=MODULES.index)


def adapter_rank(adapter: dict) -> int:
    ranks = {A.shape[0] for A, _ in adapter.values()}
    if len(ranks) != 1:
        raise ParameterError("adapter", sorted(ranks), "one LoRA rank for every module")
    return ranks.pop()


def low_rank(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SVD back to rank r: ``(A, B, s)`` with B = U_r S_r^{1/2}, A = S_r^{1/2} V_rᵀ and s all singular values."""
    check_int("rank", rank, lo=1)
    if rank > min(delta.shape):
        raise ParameterError("rank", rank, f"at most min{tuple(delta.shape)} = {min(delta.shape)} (the layer's dimensions)")
    U, s, Vh = torch.linalg.svd(delta.double(), full_matrices=False)
    root = s[:rank].sqrt()
    B = U[:, :rank] * root[None, :]
    A = root[:, None] * Vh[:rank]
    return A.float(), B.float(), s.float()


# ------------------------------------------------------------------------------------------ transfer

def _expand_kv(w: dict, spec: ModelSpec) -> dict:
    out = dict(w)
    for k in ("k", "v"):
        if k in out:
            out[k] = repeat_kv_heads(out[k], spec.kv_heads, spec.n_rep)
    return out


def head_transfer(old_w: dict, new_w: dict, deltas: dict, W_h: torch.Tensor, old: ModelSpec, new: ModelSpec,
                  head_pairs) -> dict:
    """The code's per-head Q/K/V/O rule for one layer pair. ``old_w``/``new_w``: :func:`layer_weights`;
    ``deltas``: ``{"q": ΔW, ...}`` (any subset of q, k, v, o) of the old layer; ``head_pairs``: (a, b) pairs.
    Returns the new layer's ΔW for the same keys (K/V averaged back to the new model's K/V heads)."""
    dh = old.head_dim
    dev = old_w["q"].device
    W_h = W_h.to(dev, torch.float64)
    ow = {k: v.double() for k, v in _expand_kv(old_w, old).items()}
    nw = {k: v.to(dev, torch.float64) for k, v in _expand_kv(new_w, new).items()}
    dd = {k: v.to(dev, torch.float64) for k, v in _expand_kv(deltas, old).items()}
    a_idx = torch.tensor([a for a, _ in head_pairs], dtype=torch.long, device=dev)
    b_idx = torch.tensor([b for _, b in head_pairs], dtype=torch.long, device=dev)
    out = {}
    for k in ("q", "k", "v"):
        if k not in dd:
            continue
        Wa = _heads_rows(ow[k], old.heads)[a_idx]            # (P, d_h, d_o)
        Wb = _heads_rows(nw[k], new.heads)[b_idx]            # (P, d_h, d_n)
        Da = _heads_rows(dd[k], old.heads)[a_idx]            # (P, d_h, d_o)
        M = Wa @ W_h @ Wb.transpose(1, 2)                    # (P, d_h, d_h)
        Dn = torch.zeros(new.heads, dh, new.hidden, dtype=torch.float64, device=dev)
        Dn[b_idx] = M.transpose(1, 2) @ Da @ W_h
        if k != "q" and new.n_rep > 1:                      # GQA target: average each group of query heads
            Dn = Dn.reshape(new.kv_heads, new.n_rep, dh, new.hidden).mean(1)
        out[k] = Dn.reshape(-1, new.hidden).float()
    if "o" in dd:
        Oa = _heads_cols(ow["o"], old.heads)[a_idx]          # (P, d_o, d_h)
        Ob = _heads_cols(nw["o"], new.heads)[b_idx]          # (P, d_n, d_h)
        Da = _heads_cols(dd["o"], old.heads)[a_idx]          # (P, d_o, d_h)
        M = Oa.transpose(1, 2) @ W_h @ Ob                    # (P, d_h, d_h)
        Dn = torch.zeros(new.heads, new.hidden, dh, dtype=torch.float64, device=dev)
        Dn[b_idx] = W_h.T @ Da @ M
        out["o"] = Dn.permute(1, 0, 2).reshape(new.hidden, -1).float()
    return out


def alg2_transfer(old_w: dict, new_w: dict, deltas: dict, W_h: torch.Tensor) -> dict:
    """Alg. 2's whole-matrix form (no head mapping; see the module docstring for the layouts)."""
    dev = old_w["q"].device
    W_h = W_h.to(dev, torch.float64)
    deltas = {k: v.to(dev) for k, v in deltas.items()}
    new_w = {k: v.to(dev) for k, v in new_w.items()}
    out = {}
    for k in ("q", "k", "v"):
        if k in deltas:
            out[k] = (new_w[k].double() @ W_h.T @ old_w[k].double().T @ deltas[k].double() @ W_h).float()
    if "o" in deltas:
        out["o"] = (W_h.T @ deltas["o"].double() @ old_w["o"].double().T @ W_h @ new_w["o"].double()).float()
    return out


def mlp_transfer(old_w: dict, new_w: dict, adapter_parts: dict, W_h: torch.Tensor) -> dict:
    """The code's up/down rules on the factors themselves (no SVD); ``adapter_parts``: {"up": (A, B), ...}."""
    dev = old_w["q"].device
    Wh = W_h.to(dev, torch.float64)
    Wh_pinv = torch.linalg.pinv(Wh)
    adapter_parts = {k: tuple(t.to(dev) for t in v) for k, v in adapter_parts.items()}
    new_w = {k: v.to(dev) for k, v in new_w.items()}
    out = {}
    for k in ("gate", "up"):
        if k in adapter_parts:
            A, B = (t.double() for t in adapter_parts[k])
            out[k] = ((A @ Wh).float(), (new_w[k].double() @ Wh_pinv @ torch.linalg.pinv(old_w[k].double()) @ B).float())
    if "down" in adapter_parts:
        A, B = (t.double() for t in adapter_parts["down"])
        out["down"] = ((A @ torch.linalg.pinv(old_w["down"].double()) @ Wh @ new_w["down"].double()).float(),
                       (Wh_pinv @ B).float())
    return out


def form_difference(a: dict, b: dict) -> dict:
    """Relative Frobenius distance ‖a − b‖ / ‖b‖ per key."""
    return {k: float((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-30)) for k in b if k in a}


def transfer_adapter(old_model, new_model, adapter: dict, *, W_h: torch.Tensor, layer_pairs, head_maps: dict | None = None,
                     head_sims: dict | None = None, form: str = "code", rank: int | None = None) -> dict:
    """Carry ``adapter`` from ``old_model`` to ``new_model``.

    ``layer_pairs``: (old, new) pairs (:func:`~companion.lorasuite.mapping.layer_mapping`); ``head_maps``:
    ``{(old, new): [(a, b), ...]}`` (computed here with the Hungarian rule when None); ``form``: ``"code"``
    or ``"alg2"``; ``rank``: the new rank (the old one when None). Returns ``{"adapter": new adapter,
    "head_maps", "head_sims", "tail": {key: relative SVD tail error}, "alg2_vs_code": {module: distance},
    "norm_ratio": {key: ‖ΔW_new‖_F / ‖ΔW_old‖_F before the SVD}}``."""
    from companion.lorasuite.mapping import head_mapping, head_similarity

    check_choice("form", form, FORMS)
    old, new = ModelSpec.from_config(old_model.config), ModelSpec.from_config(new_model.config)
    check_compatible(old, new)
    rank = adapter_rank(adapter) if rank is None else check_int("rank", rank, lo=1)
    if tuple(W_h.shape) != (old.hidden, new.hidden):
        raise ParameterError("W_h", tuple(W_h.shape), f"shape (d_old, d_new) = ({old.hidden}, {new.hidden})")
    for (layer, module) in adapter:
        if module not in MODULES:
            raise ParameterError("adapter target", module, f"a module the new model has: {', '.join(MODULES)}")
        if not 0 <= layer < old.layers:
            raise ParameterError("adapter layer", layer, f"a layer of the old model (0 … {old.layers - 1})")
    for a, b in layer_pairs:
        if not (0 <= a < old.layers and 0 <= b < new.layers):
            raise ParameterError("layer_pairs", (a, b), f"old layer < {old.layers} and new layer < {new.layers}")
    head_maps = dict(head_maps or {})
    head_sims = dict(head_sims or {})
    new_adapter, tail, diffs, gain = {}, {}, {}, {}
    short = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate", "up_proj": "up",
             "down_proj": "down"}
    for a, b in layer_pairs:
        mods = [m for (layer, m) in adapter if layer == a]
        if not mods:
            continue
        ow, nw = layer_weights(old_model, a), layer_weights(new_model, b)
        dev = ow["q"].device
        attn = {short[m]: (adapter[(a, m)][1].to(dev) @ adapter[(a, m)][0].to(dev)) for m in mods if m in ATTN_MODULES}
        if attn:
            if (a, b) not in head_maps:
                sim = head_similarity(_expand_kv(ow, old), _expand_kv(nw, new), W_h, old.heads, new.heads)
                head_sims[(a, b)] = sim
                head_maps[(a, b)] = head_mapping(sim.numpy())["pairs"]
            code = head_transfer(ow, nw, attn, W_h, old, new, head_maps[(a, b)])
            whole = alg2_transfer(ow, nw, attn, W_h)
            diffs[(a, b)] = form_difference(whole, code)
            deltas = code if form == "code" else whole
            for k, delta in deltas.items():
                A, B, s = low_rank(delta, rank)
                new_adapter[(b, f"{k}_proj")] = (A.cpu(), B.cpu())
                s = s.cpu()
                total = float((s ** 2).sum())
                tail[(b, f"{k}_proj")] = float((s[rank:] ** 2).sum() / total) ** 0.5 if total > 0 else 0.0
                gain[(b, f"{k}_proj")] = float(delta.norm() / attn[k].norm().clamp_min(1e-30))
        mlp = {short[m]: adapter[(a, m)] for m in mods if m in MLP_MODULES}
        for k, (A, B) in mlp_transfer(ow, nw, mlp, W_h).items():
            new_adapter[(b, f"{k}_proj")] = (A.cpu(), B.cpu())
    return {"adapter": new_adapter, "head_maps": head_maps, "head_sims": head_sims, "tail": tail, "alg2_vs_code": diffs,
            "norm_ratio": gain}


# ------------------------------------------------------------------------------------------ peft

@contextlib.contextmanager
def _quiet():
    """peft 0.21 asks transformers 5 for ``is_gradient_checkpointing``, which warns that the name is deprecated."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_config(rank: int, alpha: float, targets, layers: int | None = None):
    """peft ``LoraConfig`` (dropout 0, no bias, causal LM) for ``targets``."""
    from peft import LoraConfig

    check_int("rank", rank, lo=1)
    for t in targets:
        if t not in MODULES:
            raise ParameterError("target module", t, f"one of {', '.join(MODULES)}")
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none", target_modules=list(targets),
                      task_type="CAUSAL_LM")


def attach_lora(base_model, config, seed: int = 0):
    """A fresh LoRA model (peft's own init: A random, B = 0) on a deep copy of ``base_model``."""
    from peft import get_peft_model

    torch.manual_seed(seed)
    with _quiet():
        return get_peft_model(copy.deepcopy(base_model), config)


def load_transferred(base_model, adapter: dict, config, freeze_missing: bool = True):
    """A peft model on a copy of ``base_model`` carrying ``adapter``. Layers/modules the adapter does not
    cover get **zero LoRA weights with requires_grad=False** (the official PEFT fork's
    ``init_lora_weights="xtransform"`` behaviour, here on upstream peft) when ``freeze_missing``."""
    from peft import get_peft_model, set_peft_model_state_dict

    spec = ModelSpec.from_config(base_model.config)
    for (layer, module) in adapter:
        if module not in config.target_modules:
            raise ParameterError("adapter target", module, f"one of the config's targets {sorted(config.target_modules)}")
        if not 0 <= layer < spec.layers:
            raise ParameterError("adapter layer", layer, f"a layer of the new model (0 … {spec.layers - 1})")
    with _quiet():
        model = get_peft_model(copy.deepcopy(base_model), config)
    state = adapter_to_state(adapter)
    result = set_peft_model_state_dict(model, state)
    bad = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if bad:
        raise ParameterError("adapter", bad[:3], "keys that match the new model's LoRA layers")
    if freeze_missing:
        covered = set(adapter)
        for i, layer in enumerate(_layers(model.base_model.model)):
            for module in config.target_modules:
                if (i, module) in covered:
                    continue
                lin = getattr(getattr(layer, _GROUP[module]), module)
                for name in ("lora_A", "lora_B"):
                    for p in getattr(lin, name).parameters():
                        with torch.no_grad():
                            p.zero_()
                        p.requires_grad_(False)
    return model


def save_adapter(path, adapter: dict, config, base_name: str = "local") -> None:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` that upstream ``PeftModel.from_pretrained`` loads.
    The config's ``layers_to_transform`` lists the layers the adapter covers, so upstream peft builds LoRA
    layers only there (the others keep their base weights, the same function as the fork's zero adapters)."""
    from pathlib import Path

    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(config)
    config.layers_to_transform = sorted({int(layer) for layer, _ in adapter})
    config.base_model_name_or_path = base_name
    config.inference_mode = True
    config.save_pretrained(str(path))
    save_file(adapter_to_state(adapter), str(path / "adapter_model.safetensors"), metadata={"format": "pt"})


def load_saved(base_model, path, is_trainable: bool = False):
    """``PeftModel.from_pretrained(base_model, path)`` (upstream peft; ``base_model`` is modified in place)."""
    from peft import PeftModel

    with _quiet():
        return PeftModel.from_pretrained(base_model, str(path), is_trainable=is_trainable)


def merged_model(base_model, adapter: dict, scaling: float):
    """A copy of ``base_model`` with W ← W + scaling · B A written into each adapted weight (no peft)."""
    model = copy.deepcopy(base_model)
    layers = _layers(model)
    with torch.no_grad():
        for (layer, module), (A, B) in adapter.items():
            lin = getattr(getattr(layers[layer], _GROUP[module]), module)
            lin.weight += scaling * (B @ A).to(lin.weight.device, lin.weight.dtype)
    return model
