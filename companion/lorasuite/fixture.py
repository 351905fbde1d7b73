"""The CPU stand-in for an LLM upgrade: an old and a new char-level Llama, and LoRA adapters on a task.

* **Text A** (pre-training): the Python standard library's docstrings (``companion.models.stdlib_texts``).
* **Text B** (the downstream task): the source code of one standard-library package (default ``email``),
  split by file into training and validation text.
* **Vocabularies**: printable ASCII plus ``\\n`` and ``<unk>``; the old one lacks ``~ ^ ` |``, the new one
  lacks ``$ @`` and has its own (seeded) order, so W_h is fitted on the shared-token intersection.
* **Old model**: Llama, d = 64, 4 layers, 4 heads (d_h = 16), FFN 128, trained on A.
* **Upgrade** (:func:`upgrade`): width 64 → 96, heads 4 → 6, FFN 128 → 192, depth 4 → 6, a function-preserving
  construction (the norm gains folded into the next linear maps, a random orthogonal embedding Q (64 × 96)
  of the residual stream, the old heads placed in seeded new head slots, new heads and FFN units with zero
  output weights, new layers inserted as exact identity blocks), then relative noise and further training
  on A. Before the noise the new model's logits equal the old ones on shared tokens (tested).
* **Adapters**: LoRA rank 4 (α = 4, q/k/v/o) on B for the old model (the adapter to carry across), and the
  same recipe on the new model ("LoRA(full)", the full retraining LoRASuite is compared with).

Everything is cached under ``data/lorasuite/`` (safetensors with the recipe as metadata;
``python -m companion.lorasuite.fixture`` rebuilds it, a few minutes on two cores).
"""

from __future__ import annotations

import math
import string
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, repo_path
from companion.core.checkpoints import differences, load_state, read_metadata, save_state
from companion.lorasuite.lft import train, windows
from companion.models.texts import stdlib_source_files

FIXTURE_DIR = repo_path("data", "lorasuite")
FORMAT = "lorasuite-fixture"
_BASE_CHARS = sorted(set(string.printable) - set("\r\x0b\x0c\t"))


class CharVocab:
    """A character vocabulary: ``<unk>`` = 0, then ``chars``; unknown characters map to ``<unk>``."""

    def __init__(self, chars):
        self.tokens = ["<unk>", *chars]
        self.stoi = {c: i for i, c in enumerate(self.tokens)}

    def __len__(self):
        return len(self.tokens)

    def get_vocab(self) -> dict:
        return dict(self.stoi)

    def encode(self, text: str) -> torch.Tensor:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        table = np.zeros(max(int(codes.max(initial=0)) + 1, 128), dtype=np.int64)  # unknown code points → <unk>
        for c, i in self.stoi.items():
            if len(c) == 1:
                table[ord(c)] = i
        return torch.from_numpy(table[codes])


def old_vocab() -> CharVocab:
    return CharVocab([c for c in _BASE_CHARS if c not in "~^`|"])


def new_vocab(seed: int = 12) -> CharVocab:
    chars = [c for c in _BASE_CHARS if c not in "$@"]
    order = torch.randperm(len(chars), generator=torch.Generator().manual_seed(seed)).tolist()
    return CharVocab([chars[i] for i in order])


def pretraining_text() -> str:
    from companion.models import stdlib_texts

    return "\n".join(stdlib_texts())


TASKS = ("email", "json", "logging", "http")


def task_text(package: str = "email", val_every: int = 5) -> tuple[str, str]:
    """(train, val) source text of a standard-library package; every ``val_every``-th file is validation."""
    if package not in TASKS:
        raise ParameterError("package", package, f"one of {', '.join(TASKS)}")
    texts = [p.read_text(encoding="utf-8", errors="replace").replace("\t", "    ") for p in stdlib_source_files(package)]
    val = [t for i, t in enumerate(texts) if i % val_every == val_every - 1]
    tr = [t for i, t in enumerate(texts) if i % val_every != val_every - 1]
    if not val:  # fewer files than val_every: the last 1/val_every of the text is validation
        whole = "\n".join(texts)
        cut = len(whole) - len(whole) // val_every
        return whole[:cut], whole[cut:]
    return "\n".join(tr), "\n".join(val)


@dataclass(frozen=True)
class Recipe:
    """How the cached fixture was made (stored as its metadata; a mismatch rebuilds it)."""

    seq_len: int = 32
    old_hidden: int = 64
    old_layers: int = 4
    old_heads: int = 4
    old_ffn: int = 128
    new_hidden: int = 96
    new_layers: int = 6
    new_heads: int = 6
    new_ffn: int = 192
    inserted: tuple = (1, 4)
    old_steps: int = 1000
    old_lr: float = 3e-3
    upgrade_noise: float = 0.05
    new_steps: int = 300
    new_lr: float = 1e-3
    batch: int = 32
    task: str = "email"
    lora_rank: int = 4
    lora_alpha: float = 4.0
    lora_steps: int = 250
    lora_lr: float = 3e-3
    lora_batch: int = 16
    lora_warmup: int = 20
    seed: int = 0


def build_model(vocab_size: int, hidden: int, layers: int, heads: int, ffn: int, seed: int = 0, kv_heads=None):
    from companion.models import tiny_llama

    return tiny_llama(vocab_size=vocab_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                      num_kv_heads=kv_heads, intermediate_size=ffn, max_position=512, seed=seed)


def _random_orthogonal(n: int, gen) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))[None, :]


@torch.no_grad()
def upgrade(old_model, vocab_o: CharVocab, vocab_n: CharVocab, *, hidden: int, layers: int, heads: int, ffn: int,
            inserted=(1, 4), noise: float = 0.0, seed: int = 0) -> tuple:
    """A wider, deeper model that computes the old one's function (before ``noise``). Returns
    ``(new_model, truth)`` with ``truth = {"Q": (d_o, d_n), "layer_pairs": [(old, new)], "head_slots":
    {old layer: [new head of old head a]}}``."""
    cfg = old_model.config
    d_o, H_o, f_o, L_o = cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size, cfg.num_hidden_layers
    dh = d_o // H_o
    if hidden // heads != dh or hidden % heads:
        raise ParameterError("heads", heads, f"a head count giving the old head_dim {dh} (hidden / heads)")
    if hidden < d_o or heads < H_o or ffn < f_o or layers < L_o:
        raise ParameterError("new shape", (hidden, heads, ffn, layers), "at least the old model's in every dimension")
    inserted = sorted(inserted)
    if len(inserted) != layers - L_o or any(not 0 <= i < layers for i in inserted) or len(set(inserted)) != len(inserted):
        raise ParameterError("inserted", inserted, f"{layers - L_o} distinct new-layer positions in 0 … {layers - 1}")
    gen = torch.Generator().manual_seed(seed)
    new = build_model(len(vocab_n), hidden, layers, heads, ffn, seed=seed + 1)
    # RMSNorm over d_n dims of the embedded stream: eps_n = eps_o · d_o / d_n keeps it exact
    eps = cfg.rms_norm_eps * d_o / hidden
    new.config.rms_norm_eps = eps
    for mod in new.modules():
        if hasattr(mod, "variance_epsilon"):
            mod.variance_epsilon = eps
    Q = _random_orthogonal(hidden, gen)[:d_o].float()          # (d_o, d_n), orthonormal rows
    c = math.sqrt(hidden / d_o)
    o_sd = {k: v.float() for k, v in old_model.state_dict().items()}
    n_sd = new.state_dict()

    E_o = o_sd["model.embed_tokens.weight"]
    gf = o_sd["model.norm.weight"]
    E_n, lm_n = n_sd["model.embed_tokens.weight"], n_sd["lm_head.weight"]
    E_n.normal_(0, float(E_o.std()), generator=gen)
    lm_n.zero_()
    for tok, j in vocab_n.stoi.items():
        i = vocab_o.stoi.get(tok)
        if i is not None:
            E_n[j] = E_o[i] @ Q
            lm_n[j] = (o_sd["lm_head.weight"][i] * gf) @ Q / c
    n_sd["model.norm.weight"].fill_(1.0)

    old_for_new = [None] * layers
    rest = iter(range(L_o))
    for n_i in range(layers):
        if n_i not in inserted:
            old_for_new[n_i] = next(rest)
    slots = {}
    for n_i, o_i in enumerate(old_for_new):
        p = f"model.layers.{n_i}."
        n_sd[p + "input_layernorm.weight"].fill_(1.0)
        n_sd[p + "post_attention_layernorm.weight"].fill_(1.0)
        n_sd[p + "self_attn.o_proj.weight"].zero_()
        n_sd[p + "mlp.down_proj.weight"].zero_()
        if o_i is None:
            continue                                   # an exact identity block (zero output maps)
        q = f"model.layers.{o_i}."
        g1, g2 = o_sd[q + "input_layernorm.weight"], o_sd[q + "post_attention_layernorm.weight"]
        slot = torch.randperm(heads, generator=gen)[:H_o].tolist()
        slots[o_i] = slot
        for name in ("q_proj", "k_proj", "v_proj"):
            W_o = o_sd[q + f"self_attn.{name}.weight"].reshape(H_o, dh, d_o)
            W_n = n_sd[p + f"self_attn.{name}.weight"].view(heads, dh, hidden)
            for a, b in enumerate(slot):
                W_n[b] = (W_o[a] * g1) @ Q / c
        O_o = o_sd[q + "self_attn.o_proj.weight"].reshape(d_o, H_o, dh)
        O_n = n_sd[p + "self_attn.o_proj.weight"].view(hidden, heads, dh)
        for a, b in enumerate(slot):
            O_n[:, b] = Q.T @ O_o[:, a]
        for name in ("gate_proj", "up_proj"):
            n_sd[p + f"mlp.{name}.weight"][:f_o] = (o_sd[q + f"mlp.{name}.weight"] * g2) @ Q / c
        n_sd[p + "mlp.down_proj.weight"][:, :f_o] = Q.T @ o_sd[q + "mlp.down_proj.weight"]
    if noise > 0:
        for k, v in n_sd.items():
            if v.ndim == 2:
                v += noise * float(v.std()) * torch.randn(v.shape, generator=gen)
    new.load_state_dict(n_sd)
    pairs = [(o_i, n_i) for n_i, o_i in enumerate(old_for_new) if o_i is not None]
    return new.eval(), {"Q": Q, "layer_pairs": pairs, "head_slots": slots}


# ------------------------------------------------------------------------------------------ the cache

def _paths(folder) -> dict:
    folder = Path(folder)
    return {k: folder / f"{k}.safetensors" for k in ("old_model", "new_model", "old_lora", "full_lora")}


def _data(recipe: Recipe) -> dict:
    vo, vn = old_vocab(), new_vocab()
    a = pretraining_text()
    b_train, b_val = task_text(recipe.task)
    T = recipe.seq_len + 1
    return {"vocab_old": vo, "vocab_new": vn,
            "A_old": windows(vo.encode(a), T, seed=1), "A_new": windows(vn.encode(a), T, seed=1),
            "B_train_old": windows(vo.encode(b_train), T, seed=2), "B_train_new": windows(vn.encode(b_train), T, seed=2),
            "B_val_old": windows(vo.encode(b_val), T, seed=3)[:64], "B_val_new": windows(vn.encode(b_val), T, seed=3)[:64]}


def _lora(model, recipe: Recipe, data_, val, seed):
    from peft import get_peft_model_state_dict

    from companion.lorasuite.transfer import attach_lora, lora_config

    cfg = lora_config(recipe.lora_rank, recipe.lora_alpha, ["q_proj", "k_proj", "v_proj", "o_proj"])
    peft_model = attach_lora(model, cfg, seed=seed)
    hist = train(peft_model, data_, lr=recipe.lora_lr, steps=recipe.lora_steps, batch=recipe.lora_batch,
                 warmup=recipe.lora_warmup, seed=seed, val=val, eval_every=recipe.lora_steps)
    return get_peft_model_state_dict(peft_model), hist


def build_fixture(recipe: Recipe = Recipe(), folder=None, log=print) -> dict:
    """Train and save the whole fixture (minutes); returns :func:`load_fixture`'s dict."""
    folder = Path(folder or FIXTURE_DIR)
    torch.manual_seed(recipe.seed)
    d = _data(recipe)
    meta = {"format": FORMAT, "recipe": asdict(recipe), "command": "python -m companion.lorasuite.fixture"}
    old = build_model(len(d["vocab_old"]), recipe.old_hidden, recipe.old_layers, recipe.old_heads, recipe.old_ffn,
                      seed=recipe.seed)
    h = train(old, d["A_old"], lr=recipe.old_lr, steps=recipe.old_steps, batch=recipe.batch, warmup=50,
              seed=recipe.seed, weight_decay=0.01)
    log(f"old model: train loss {sum(h['train'][-50:]) / len(h['train'][-50:]):.3f}")
    new, truth = upgrade(old, d["vocab_old"], d["vocab_new"], hidden=recipe.new_hidden, layers=recipe.new_layers,
                         heads=recipe.new_heads, ffn=recipe.new_ffn, inserted=recipe.inserted,
                         noise=recipe.upgrade_noise, seed=recipe.seed)
    h = train(new, d["A_new"], lr=recipe.new_lr, steps=recipe.new_steps, batch=recipe.batch, warmup=20,
              seed=recipe.seed + 1, weight_decay=0.01)
    log(f"new model: train loss {sum(h['train'][-50:]) / len(h['train'][-50:]):.3f}")
    old_lora, h1 = _lora(old, recipe, d["B_train_old"], d["B_val_old"], recipe.seed + 2)
    full_lora, h2 = _lora(new, recipe, d["B_train_new"], d["B_val_new"], recipe.seed + 3)
    log("adapters trained")
    log(f"LoRA on B: old {h1['val'][0]:.3f} → {h1['val'][-1]:.3f}, new {h2['val'][0]:.3f} → {h2['val'][-1]:.3f}")
    p = _paths(folder)
    truth_meta = {"layer_pairs": truth["layer_pairs"], "head_slots": {str(k): v for k, v in truth["head_slots"].items()}}
    save_state(p["old_model"], old.state_dict(), {**meta, "config": old.config.to_dict()})
    save_state(p["new_model"], new.state_dict(), {**meta, "config": new.config.to_dict(), "upgrade": truth_meta})
    save_state(p["old_lora"], old_lora, {**meta, "val_before_after": [h1["val"][0], h1["val"][-1]]})
    save_state(p["full_lora"], full_lora, {**meta, "val_before_after": [h2["val"][0], h2["val"][-1]]})
    return load_fixture(recipe, folder)


def fixture_ready(recipe: Recipe = Recipe(), folder=None) -> bool:
    p = _paths(folder or FIXTURE_DIR)
    if not all(f.exists() for f in p.values()):
        return False
    return not differences(asdict(recipe), read_metadata(p["old_model"], format=FORMAT)["recipe"])


def load_fixture(recipe: Recipe = Recipe(), folder=None, build: bool = True, log=print) -> dict:
    """The cached fixture (built first when missing or made by another recipe and ``build``): models,
    adapters, vocabularies and the tokenised texts."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from companion.lorasuite.transfer import adapter_from_state

    folder = Path(folder or FIXTURE_DIR)
    if not fixture_ready(recipe, folder):
        if not build:
            raise FileNotFoundError(f"no LoRASuite fixture for this recipe in {folder}; run python -m companion.lorasuite.fixture")
        return build_fixture(recipe, folder, log=log)
    p = _paths(folder)
    out = _data(recipe)
    for key in ("old_model", "new_model"):
        state, meta = load_state(p[key], format=FORMAT)
        cfg = LlamaConfig(**{k: v for k, v in meta["config"].items() if k not in ("architectures", "transformers_version")})
        cfg._attn_implementation = "eager"
        model = LlamaForCausalLM(cfg)
        model.load_state_dict(state)
        out[key] = model.eval()
        if key == "new_model":
            out["upgrade"] = meta["upgrade"]
    for key in ("old_lora", "full_lora"):
        state, meta = load_state(p[key], format=FORMAT)
        out[key] = adapter_from_state(state)
        out[key + "_val"] = meta["val_before_after"]
    out["recipe"] = recipe
    return out


if __name__ == "__main__":  # pragma: no cover - the command that made data/lorasuite/
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    build_fixture(Recipe(), args.folder)
