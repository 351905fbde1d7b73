"""The whole of LoRASuite on a model pair, and the experiment the notebook runs on the CPU fixture.

:func:`lorasuite` chains the steps of the paper (§3): W_h over the shared tokens → minibatch CKA between all
layer pairs → Alg. 1's layer map → per layer pair the Hungarian head map → the per-head transfer and SVD →
(optionally) LFT. :func:`experiment` runs it on the fixture (:mod:`~companion.lorasuite.fixture`) and sets it
beside the baselines of the paper's Table 4: the new model alone, LoRA(n) from scratch on the same n
samples, and LoRA(full) retrained on all of the task's training text.

CKA data (a documented choice, the official code omits it): ``source="task"`` uses windows of the task's
training text, ``"pretraining"`` windows of the pre-training text; ``windows_per_batch`` windows per
minibatch, ``tokens`` positions per minibatch.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.lorasuite.cka import cka_from_terms, layer_cka_terms
from companion.lorasuite.lft import evaluate, train
from companion.lorasuite.mapping import LAYER_RULES, layer_mapping
from companion.lorasuite.transfer import (
    adapter_targets,
    attach_lora,
    load_transferred,
    lora_config,
    merged_model,
    transfer_adapter,
)
from companion.lorasuite.transfer_matrix import common_tokens, transfer_matrix

CKA_SOURCES = ("task", "pretraining")
LRS = (1e-4, 3e-4, 1e-3)  # the LFT learning rates swept here (paper: 1e-4 … 9e-4)
CKA_WINDOWS = 8  # windows per CKA minibatch


def fit_transfer_matrix(fx: dict) -> dict:
    """W_h of the fixture pair from their input embeddings over the shared characters."""
    io, inn, shared = common_tokens(fx["vocab_old"].get_vocab(), fx["vocab_new"].get_vocab())
    res = transfer_matrix(fx["old_model"].model.embed_tokens.weight, fx["new_model"].model.embed_tokens.weight, io, inn)
    return {**res, "shared": shared}


def cka_terms(fx: dict, source: str = "task", n_minibatches: int = 8, windows_per_batch: int = CKA_WINDOWS, tokens: int = 128,
              seed: int = 0) -> dict:
    """HSIC terms for minibatch CKA between every old and new layer on ``n_minibatches`` minibatches."""
    check_choice("source", source, CKA_SOURCES)
    check_int("n_minibatches", n_minibatches, lo=1)
    check_int("windows_per_batch", windows_per_batch, lo=1)
    key_o, key_n = ("B_train_old", "B_train_new") if source == "task" else ("A_old", "A_new")
    need = n_minibatches * windows_per_batch
    if n_minibatches > 16 or need > len(fx[key_o]):
        raise ParameterError("n_minibatches", n_minibatches, f"at most {min(16, len(fx[key_o]) // windows_per_batch)}")
    # the last windows of the training text: not the first ones, which the LFT samples are drawn from
    wo, wn = fx[key_o][-need:, :-1], fx[key_n][-need:, :-1]
    ob = list(wo.split(windows_per_batch))
    nb = list(wn.split(windows_per_batch))
    return layer_cka_terms(fx["old_model"], fx["new_model"], ob, nb, tokens=tokens, seed=seed)


def scaling(fx: dict) -> float:
    r = fx["recipe"]
    return r.lora_alpha / r.lora_rank


def transferred_loss(fx: dict, adapter: dict) -> float:
    """Validation loss of the new model carrying ``adapter`` (merged; no fine-tuning)."""
    return evaluate(merged_model(fx["new_model"], adapter, scaling(fx)), fx["B_val_new"])


def lorasuite(fx: dict, W_h=None, terms=None, *, source: str = "task", n_minibatches: int = 8, tokens: int = 128,
              rule: str = "dp", offset: int | None = None, form: str = "code", seed: int = 0) -> dict:
    """Steps 1-4 of LoRASuite on a model pair (``fx``: models, vocabularies, texts, the old adapter), timed:
    W_h (when not given), CKA terms on ``source`` (when not given), the layer map, head maps, transfer, SVD.
    Returns the maps, the similarity matrices, the new adapter and ``seconds``."""
    check_choice("rule", rule, LAYER_RULES)
    t0 = time.perf_counter()
    W_h = W_h if W_h is not None else fit_transfer_matrix(fx)
    terms = terms if terms is not None else cka_terms(fx, source, n_minibatches=n_minibatches, tokens=tokens, seed=seed)
    S = cka_from_terms(terms)
    lm = layer_mapping(S, rule=rule, offset=offset)
    res = transfer_adapter(fx["old_model"], fx["new_model"], fx["old_lora"], W_h=W_h["W_h"], layer_pairs=lm["pairs"],
                           form=form)
    return {"W_h": W_h, "terms": terms, "S": S, "layer_map": lm, **res, "seconds": time.perf_counter() - t0}


def _final(h: dict) -> float:
    return float(h["val"][-1])


def experiment(fx: dict, suite: dict, *, n_samples: int = 100, epochs: int = 3, batch: int = 16, lrs=LRS, seeds=(0,),
               scratch_lrs=None, n_evals: int = 3, scratch_warmup: int = 0, log=None) -> dict:
    """LFT of ``suite``'s transferred adapter at every lr in ``lrs`` against LoRA(n_samples) from scratch at every
    lr in ``scratch_lrs`` (default: the largest of ``lrs`` only, the strongest of the grid for LoRA(n) on this
    fixture and no warm-up, which favours the baseline over the paper's LoRA(100) recipe of lr 3e-4 with 100
    warm-up steps), for every seed; beside LoRA(full) and the new model alone. The samples are drawn (per
    seed) from the task's training windows not used for CKA. Everything returned is measured now."""
    lrs = [check_float("lr", x, lo=0.0, lo_open=True) for x in lrs]
    scratch_lrs = [max(lrs)] if scratch_lrs is None else [check_float("lr", x, lo=0.0, lo_open=True) for x in scratch_lrs]
    check_int("n_samples", n_samples, lo=batch, hi=len(fx["B_train_new"]) - 16 * CKA_WINDOWS)
    check_int("epochs", epochs, lo=1)
    check_int("batch", batch, lo=1)
    check_int("n_evals", n_evals, lo=1)
    seeds = [check_int("seed", s, lo=0) for s in seeds]
    if not seeds:
        raise ParameterError("seeds", seeds, "at least one seed")
    log = log or (lambda *_: None)
    steps = epochs * -(-n_samples // batch)
    eval_every = max(1, steps // n_evals)
    out = {
        "val": {"new_base": evaluate(fx["new_model"], fx["B_val_new"]), "full_lora": transferred_loss(fx, fx["full_lora"]),
                "transferred": transferred_loss(fx, suite["adapter"]),
                "old_base": evaluate(fx["old_model"], fx["B_val_old"]),
                "old_lora": evaluate(merged_model(fx["old_model"], fx["old_lora"], scaling(fx)), fx["B_val_old"])},
        "lft": {}, "scratch": {}, "seconds": {"transfer": suite["seconds"], "lft": [], "scratch": []},
        "sizes": {"n_samples": n_samples, "epochs": epochs, "batch": batch, "steps": steps, "seeds": seeds,
                  "lrs": list(lrs), "scratch_lrs": list(scratch_lrs), "full_steps": fx["recipe"].lora_steps, "full_batch": fx["recipe"].lora_batch,
                  "scratch_warmup": scratch_warmup},
    }
    r = fx["recipe"]
    cfg = lora_config(r.lora_rank, r.lora_alpha, adapter_targets(fx["old_lora"]))
    pool = len(fx["B_train_new"]) - 16 * CKA_WINDOWS  # the CKA minibatches come from the last windows
    for seed in seeds:
        data = fx["B_train_new"][torch.randperm(pool, generator=torch.Generator().manual_seed(seed))[:n_samples]]
        for lr in lrs:
            model = load_transferred(fx["new_model"], suite["adapter"], cfg, freeze_missing=True)
            t = time.perf_counter()
            h = train(model, data, lr=lr, epochs=epochs, batch=batch, warmup=0, seed=seed, val=fx["B_val_new"],
                      eval_every=eval_every, val0=out["val"]["transferred"])
            out["seconds"]["lft"].append(time.perf_counter() - t)
            out["lft"].setdefault(lr, []).append(h)
            log(f"seed {seed} lr {lr:g}: LFT {_final(h):.3f}")
        for lr in scratch_lrs:
            model = attach_lora(fx["new_model"], cfg, seed=seed)
            t = time.perf_counter()
            h = train(model, data, lr=lr, epochs=epochs, batch=batch, warmup=scratch_warmup, seed=seed,
                      val=fx["B_val_new"], eval_every=eval_every, val0=out["val"]["new_base"])  # B = 0: the base model
            out["seconds"]["scratch"].append(time.perf_counter() - t)
            out["scratch"].setdefault(lr, []).append(h)
            log(f"seed {seed} lr {lr:g}: LoRA({n_samples}) {_final(h):.3f}")
    return out


def best_lr(runs: dict) -> float:
    """The learning rate with the lowest mean final validation loss."""
    return min(runs, key=lambda lr: np.mean([_final(h) for h in runs[lr]]))


def summary(res: dict) -> dict:
    """Final losses per method and lr (mean over seeds), best lrs, per-seed differences at the best lrs."""
    fin = {m: {lr: [_final(h) for h in hs] for lr, hs in res[m].items()} for m in ("lft", "scratch")}
    bl, bs = best_lr(res["lft"]), best_lr(res["scratch"])
    return {"final": fin, "best_lr": {"lft": bl, "scratch": bs},
            "lft_best": fin["lft"][bl], "scratch_best": fin["scratch"][bs],
            "diff_vs_scratch": [s - lft for s, lft in zip(fin["scratch"][bs], fin["lft"][bl])]}


def recovery(fx: dict, suite: dict) -> dict:
    """How well the layer and head maps of this run recover the fixture's known upgrade construction."""
    from companion.lorasuite.mapping import head_mapping, head_similarity
    from companion.lorasuite.transfer import ModelSpec, _expand_kv, layer_weights

    so, sn = ModelSpec.from_config(fx["old_model"].config), ModelSpec.from_config(fx["new_model"].config)
    W_h = suite["W_h"]["W_h"]
    truth = [tuple(p) for p in fx["upgrade"]["layer_pairs"]]
    hits = total = 0
    for o_i, n_i in truth:
        sim = head_similarity(_expand_kv(layer_weights(fx["old_model"], o_i), so),
                              _expand_kv(layer_weights(fx["new_model"], n_i), sn), W_h, so.heads, sn.heads)
        got = [b for _, b in head_mapping(sim.numpy())["pairs"]]
        want = fx["upgrade"]["head_slots"][str(o_i)]
        hits += sum(g == w for g, w in zip(got, want))
        total += len(want)
    return {"layer_pairs": suite["layer_map"]["pairs"], "true_layer_pairs": truth, "head_recovery": hits / total,
            "cka_minibatches": int(suite["terms"]["xy"].shape[0]), "cka_tokens": suite["terms"]["tokens"]}


# ------------------------------------------------------------------------------------------ real checkpoints

@torch.no_grad()
def pooled_layer_outputs(model, batch: dict) -> torch.Tensor:
    """Each decoder layer's output mean-pooled over a text's tokens: (L, n_texts, d). With two tokenizers the
    token positions of the two models do not align, so for real pairs the CKA examples are texts."""
    dev = next(model.parameters()).device
    ids, mask = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
    outs = []
    hooks = [layer.register_forward_hook(lambda _m, _i, o: outs.append(o[0] if isinstance(o, tuple) else o))
             for layer in model.model.layers]
    try:
        model(input_ids=ids, attention_mask=mask, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    m = mask[..., None].float()
    return torch.stack([((o.float() * m).sum(1) / m.sum(1).clamp_min(1)).cpu() for o in outs])


def transfer_checkpoints(old: str, new: str, adapter: str, out: str, texts, *, texts_per_batch: int = 8,
                         max_length: int = 128, rule: str = "dp", offset: int | None = None, form: str = "code") -> dict:
    """LoRASuite on Hugging Face checkpoints: ``old``/``new`` local folders (or ids already in the local cache;
    nothing is downloaded), ``adapter`` a peft LoRA folder trained on ``old``; writes the transferred adapter to
    ``out`` (loadable with upstream ``PeftModel.from_pretrained``). ``texts``: the CKA texts, in minibatches of
    ``texts_per_batch`` (the examples of each minibatch are texts, mean-pooled over their tokens)."""
    from peft import LoraConfig
    from safetensors.torch import load_file

    from companion.lorasuite.cka import hsic_terms
    from companion.lorasuite.transfer import adapter_from_state, save_adapter
    from companion.models import load_model

    texts = list(texts)
    check_int("texts_per_batch", texts_per_batch, lo=4)
    if len(texts) < texts_per_batch:
        raise ParameterError("texts", len(texts), f"at least texts_per_batch = {texts_per_batch} texts")
    tok_o, m_o = load_model(old, causal=True)
    tok_n, m_n = load_model(new, causal=True)
    cfg = LoraConfig.from_pretrained(adapter)
    old_lora = adapter_from_state(load_file(str(Path(adapter) / "adapter_model.safetensors")))
    io, inn, shared = common_tokens(tok_o.get_vocab(), tok_n.get_vocab())
    wh = transfer_matrix(m_o.get_input_embeddings().weight, m_n.get_input_embeddings().weight, io, inn)
    feats_o, feats_n = [], []
    for i in range(0, len(texts) - texts_per_batch + 1, texts_per_batch):
        chunk = texts[i:i + texts_per_batch]
        enc = [tok(chunk, return_tensors="pt", padding=True, truncation=True, max_length=max_length) for tok in (tok_o, tok_n)]
        feats_o.append(pooled_layer_outputs(m_o, enc[0]))
        feats_n.append(pooled_layer_outputs(m_n, enc[1]))
    fx = {"old_model": m_o, "new_model": m_n, "old_lora": old_lora}
    suite = lorasuite(fx, {**wh, "shared": shared}, hsic_terms(feats_o, feats_n), rule=rule, offset=offset, form=form)
    save_adapter(out, suite["adapter"], cfg, base_name=new)
    return {"layer_pairs": suite["layer_map"]["pairs"], "W_h_r2": wh["r2"], "n_common": wh["n_common"],
            "alg2_vs_code": suite["alg2_vs_code"], "seconds": suite["seconds"], "out": str(out)}
