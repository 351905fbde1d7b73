"""Low-Rank Clone: a student made of projected teacher weights, and the activation-clone loss.

Paper §3 and Algorithm 1 (Hao et al., NeurIPS 2025, arXiv 2505.12781).

**Soft pruning** (paper Eq. 1-2). The teacher is frozen. For layer i and m in {q, k, v, o, up, gate,
down} a trainable projection ``W^p_{m,i}`` in R^{d_T x d_S} generates the student weight
``W^S_{m,i} = W^T_{m,i} W^p_{m,i}``; embedding and LM head likewise (``W^S_emb = W^T_emb W^p_emb``,
``W^S_lm = W^T_lm W^p_lm``). In ``nn.Linear`` terms (weight ``[out, in]``):

* *readers* of the residual stream (q, k, v, gate, up, LM head) get their **input** axis compressed:
  ``W_S = W_T P`` (``[out, d_T] @ [d_T, d_S]``);
* *writers* (o, down) get their **output** axis compressed: ``W_S = Pᵀ W_T``, so the student's output
  is the teacher's output projected, ``o_S = (a W_Tᵀ) P``; a writer's bias becomes ``b_T P``;
* embeddings are writers of the stream: ``E_S = E_T P_emb``.

Only the residual width shrinks: head count, head_dim and FFN size stay the teacher's. Trainable: the
projections (init N(0, 0.02)) and the student's norm gains (init 1, as the official ``reinit_weight``).
Every student weight is a :mod:`torch.nn.utils.parametrize` parametrization of a Hugging Face module, so
the student *is* a ``LlamaForCausalLM`` / ``BertModel`` whose weights are computed from the teacher's.

**Activation clone** (paper Eq. 4-6), MSE ``E`` (mean) at every layer::

    L_clone = Σ_i [ Σ_{m∈{q,k,v,gate,up}} E(h^S_{m,i}, h^T_{m,i})
                    + E(o^S_attn,i, o^T_attn,i W^p_{o,i}) + E(o^S_ffn,i, o^T_ffn,i W^p_{down,i}) ]
    L = L_LM + L_KL(teacher ‖ student; T) + α L_clone            (T = 40, α = 0.2)

Paper vs official code, as flags with the paper as default (:class:`LRCConfig`):

* ``attn_out_width="student"`` (paper) compares ``o_S`` with ``o_T W^p_o``; ``"teacher"`` (code, the
  ``AllAttn`` path) compares ``a_S W^T_oᵀ`` with ``a_T W^T_oᵀ`` before the projection.
* ``kl_t2=False`` (code) or ``True``: the KL term ``F.kl_div(log_softmax(s/T), log_softmax(t/T),
  log_target=True, reduction="batchmean")`` is KL(teacher ‖ student) divided by the batch size only;
  the code has no T² factor, Hinton's convention multiplies by T².
* The code's default FFN path (``use_in_out_mlp=False``) is the paper's; the in/out-only variant is
  not built. One :class:`LRCConfig` object is read by training *and* :func:`merge`, so the flag mismatch
  of the official README (training without, converting with ``--use-in-out-mlp 1``) cannot happen here.

**Encoder stand-in (deviation).** The CPU notebook clones all-MiniLM-L6-v2, a BERT *encoder*: it has
no LM head, so L_LM + L_KL is replaced by a sentence-embedding objective (:func:`sentence_loss`), and the
FFN "up" clone is on ``intermediate.dense`` (BERT's FFN has no gate). The word, position and token-type
embeddings share one projection (they are summed into the stream). BERT's biases of readers stay the
teacher's (frozen); biases of writers are projected.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from companion.core import ParameterError, check_bool, check_choice, check_float, check_int

TERMS = ("q", "k", "v", "gate", "up", "attn_out", "ffn_out")
ATTN_TERMS = ("q", "k", "v", "attn_out")
FFN_TERMS = ("gate", "up", "ffn_out")
READERS = ("q", "k", "v", "gate", "up")
WRITERS = ("o", "down")
FAMILIES = ("llama", "bert")
# max |student - teacher| output (and every clone term) with d_S = d_T, identity projections and the teacher's
# norms: an implementation check (the notebook's Checks section), not a claim of the paper
IDENTITY_TOL = 1e-5


@dataclass(frozen=True)
class LRCConfig:
    """Everything that shapes the student and its losses; read by training and by :func:`merge`.

    ``d_student``: residual width d_S (1 <= d_S <= d_T). ``alpha``: weight of L_clone (paper 0.2).
    ``temperature``: KL temperature (paper 40). ``kl_t2``: multiply the KL by T² (code: no).
    ``attn_out_width``: "student" (paper) or "teacher" (code). ``clone_terms``: which terms enter
    L_clone (ablations drop some). ``tie_word_emb_proj``: one projection for embedding and LM head.
    ``share_qkv_gate_up``: the weight-sharing study (q = k = v and gate = up projections).
    ``init_std``: std of the N(0, std²) projection init. ``norm_init``: "ones" (code) or "teacher"
    (copy the teacher's gains; needs d_S = d_T, used by the identity check).
    """

    d_student: int
    alpha: float = 0.2
    temperature: float = 40.0
    kl_t2: bool = False
    attn_out_width: str = "student"
    clone_terms: tuple = TERMS
    tie_word_emb_proj: bool = False
    share_qkv_gate_up: bool = False
    init_std: float = 0.02
    norm_init: str = "ones"

    def __post_init__(self):
        check_int("d_student", self.d_student, lo=1)
        check_float("alpha", self.alpha, lo=0.0)
        check_float("temperature", self.temperature, lo=0.0, lo_open=True)
        check_bool("kl_t2", self.kl_t2)
        check_choice("attn_out_width", self.attn_out_width, ("student", "teacher"))
        terms = tuple(self.clone_terms)
        for t in terms:
            check_choice("clone_terms", t, TERMS)
        object.__setattr__(self, "clone_terms", terms)
        check_bool("tie_word_emb_proj", self.tie_word_emb_proj)
        check_bool("share_qkv_gate_up", self.share_qkv_gate_up)
        check_float("init_std", self.init_std, lo=0.0, lo_open=True)
        check_choice("norm_init", self.norm_init, ("ones", "teacher"))

    def as_dict(self) -> dict:
        d = asdict(self)
        d["clone_terms"] = list(self.clone_terms)
        return d


# --------------------------------------------------------------------------------------------------
# parametrizations: the student's weights as functions of the frozen teacher's and the projections


class ProjectFromTeacher(nn.Module):
    """``W_S = W_T P`` (``side="in"``: readers, embeddings) or ``W_S = Pᵀ W_T`` (``side="out"``:
    writers; for a bias vector ``b_S = b_T P``). The teacher tensor is a non-persistent buffer (shared
    storage, never trained); ``P`` is a shared :class:`nn.Parameter` of shape ``[d_T, d_S]``."""

    def __init__(self, teacher_tensor: torch.Tensor, proj: nn.Parameter, side: str):
        super().__init__()
        check_choice("side", side, ("in", "out"))
        self.side = side
        self.register_buffer("teacher", teacher_tensor.detach(), persistent=False)
        self.proj = proj

    def forward(self, _original: torch.Tensor) -> torch.Tensor:  # the student's own tensor is ignored
        w, p = self.teacher, self.proj
        if w.dim() == 1:  # bias of a writer
            return w @ p
        return w @ p if self.side == "in" else p.t() @ w


class ProjectedEmbedding(nn.Module):
    """``E_S = E_T P`` without materialising it: ``embedding(ids, E_T) @ P`` (the same numbers; a
    vocabulary of 30k rows would otherwise be projected at every step). ``.weight`` gives ``E_T P``."""

    def __init__(self, teacher_emb: nn.Embedding, proj: nn.Parameter):
        super().__init__()
        self.register_buffer("teacher", teacher_emb.weight.detach(), persistent=False)
        self.padding_idx = teacher_emb.padding_idx
        self.proj = proj

    @property
    def weight(self) -> torch.Tensor:
        return self.teacher @ self.proj

    @property
    def embedding_dim(self) -> int:
        return self.proj.shape[1]

    @property
    def num_embeddings(self) -> int:
        return self.teacher.shape[0]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.teacher) @ self.proj


def _project(module: nn.Module, name: str, teacher_tensor: torch.Tensor, proj: nn.Parameter, side: str) -> None:
    parametrize.register_parametrization(module, name, ProjectFromTeacher(teacher_tensor, proj, side))
    module.parametrizations[name].original.requires_grad_(False)


# --------------------------------------------------------------------------------------------------
# per-family layout: where q, k, v, o, gate, up, down, the norms and the embeddings live


def family_of(teacher: nn.Module) -> str:
    """"llama" for a Llama-layout causal LM (``LlamaForCausalLM``, also Qwen2/Mistral layouts), "bert"
    for a ``BertModel``; anything else raises ``ValueError`` naming what is missing."""
    if hasattr(teacher, "model") and hasattr(teacher.model, "layers") and hasattr(teacher, "lm_head"):
        layer = teacher.model.layers[0]
        need = [f"self_attn.{m}_proj" for m in ("q", "k", "v", "o")] + [f"mlp.{m}_proj" for m in ("gate", "up", "down")]
        missing = [n for n in need if _get(layer, n) is None]
        if missing:
            raise ValueError(f"teacher layer 0 lacks the expected projections {missing} of a Llama layout")
        return "llama"
    if hasattr(teacher, "encoder") and hasattr(teacher, "embeddings") and hasattr(teacher.encoder, "layer"):
        layer = teacher.encoder.layer[0]
        need = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                "intermediate.dense", "output.dense"]
        missing = [n for n in need if _get(layer, n) is None]
        if missing:
            raise ValueError(f"teacher layer 0 lacks the expected projections {missing} of a BERT layout")
        return "bert"
    raise ValueError(f"teacher {type(teacher).__name__} is neither a Llama-layout causal LM (model.layers, lm_head) "
                     "nor a BertModel (embeddings, encoder.layer)")


def _get(root, dotted):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def layer_modules(model: nn.Module, family: str) -> list[dict]:
    """Per layer ``{"q","k","v","o","up","down"[, "gate"], "norms": [...]}`` of a teacher or student."""
    out = []
    if family == "llama":
        for lyr in model.model.layers:
            a, m = lyr.self_attn, lyr.mlp
            out.append({"q": a.q_proj, "k": a.k_proj, "v": a.v_proj, "o": a.o_proj, "gate": m.gate_proj,
                        "up": m.up_proj, "down": m.down_proj, "norms": [lyr.input_layernorm, lyr.post_attention_layernorm]})
    else:
        for lyr in model.encoder.layer:
            s = lyr.attention.self
            out.append({"q": s.query, "k": s.key, "v": s.value, "o": lyr.attention.output.dense,
                        "up": lyr.intermediate.dense, "down": lyr.output.dense,
                        "norms": [lyr.attention.output.LayerNorm, lyr.output.LayerNorm]})
    return out


def teacher_width(teacher: nn.Module) -> int:
    return int(teacher.config.hidden_size)


def _bert_widen_attention(model: nn.Module, n_heads: int, head_dim: int) -> None:
    """Give a BERT of residual width d_S the teacher's n_heads x head_dim attention (q/k/v/o shapes)."""
    inner = n_heads * head_dim
    for lyr in model.encoder.layer:
        s = lyr.attention.self
        d_s = s.query.in_features
        s.query, s.key, s.value = (nn.Linear(d_s, inner) for _ in range(3))
        s.num_attention_heads, s.attention_head_size, s.all_head_size = n_heads, head_dim, inner
        if hasattr(s, "scaling"):
            s.scaling = head_dim ** -0.5
        lyr.attention.output.dense = nn.Linear(inner, d_s)


def student_like(teacher: nn.Module, d_student: int, *, seed: int | None = None) -> nn.Module:
    """A randomly initialised Hugging Face model of the teacher's family with residual width ``d_student``
    and the teacher's heads, head_dim, FFN size, vocabulary and depth (the LRC student's shape)."""
    family = family_of(teacher)
    cfg = copy.deepcopy(teacher.config)
    d_t = teacher_width(teacher)
    check_int("d_student", d_student, lo=1, hi=d_t)
    if seed is not None:
        torch.manual_seed(seed)
    if family == "llama":
        head_dim = getattr(cfg, "head_dim", None) or d_t // cfg.num_attention_heads
        cfg.head_dim = head_dim
        cfg.hidden_size = d_student
        cfg.attention_dropout = 0.0
        cfg.tie_word_embeddings = False
        student = type(teacher)(cfg)
    else:
        n_heads = cfg.num_attention_heads
        head_dim = d_t // n_heads
        cfg.hidden_size = d_student
        cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0  # a clone is deterministic
        cfg.num_attention_heads = 1  # any divisor of d_student; the attention is rebuilt below
        student = type(teacher)(cfg, add_pooling_layer=False)
        student.config.num_attention_heads = n_heads
        _bert_widen_attention(student, n_heads, head_dim)
        student.config.lrc_head_dim = head_dim
    return student.to(next(teacher.parameters()).dtype).eval()


# --------------------------------------------------------------------------------------------------


class LowRankClone(nn.Module):
    """Teacher (frozen) + projections + a parametrized Hugging Face student.

    ``forward(input_ids, attention_mask=None)`` runs both models and returns a dict with the student's
    output, the teacher's, and ``clone`` = {(layer, term): MSE}. Train ``trainable_parameters()``.
    """

    def __init__(self, teacher: nn.Module, config: LRCConfig, *, seed: int = 0):
        super().__init__()
        if not isinstance(config, LRCConfig):
            raise TypeError(f"config must be an LRCConfig, got {type(config).__name__}")
        self.family = family_of(teacher)
        self.config = config
        d_t = teacher_width(teacher)
        if config.d_student > d_t:
            raise ParameterError("d_student", config.d_student, f"an integer >= 1 and <= the teacher width d_T = {d_t}")
        if config.tie_word_emb_proj:
            if self.family != "llama":
                raise ParameterError("tie_word_emb_proj", True, "False for an encoder teacher (it has no LM head)")
            e, h = teacher.get_input_embeddings().weight, teacher.get_output_embeddings().weight
            if e.shape != h.shape:
                raise ParameterError("tie_word_emb_proj", True,
                                     f"False: the teacher's embedding {tuple(e.shape)} and LM head {tuple(h.shape)} differ")
        if config.norm_init == "teacher" and config.d_student != d_t:
            raise ParameterError("norm_init", "teacher", f"'ones' unless d_student equals the teacher width {d_t}")
        self.teacher = teacher.eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        device = next(teacher.parameters()).device
        self.student = student_like(teacher, config.d_student, seed=seed).to(device)
        for p in self.student.parameters():
            p.requires_grad_(False)
        gen = torch.Generator().manual_seed(seed)
        self.proj = nn.ParameterDict()

        def new(name):
            w = torch.randn(d_t, config.d_student, generator=gen) * config.init_std
            self.proj[name] = nn.Parameter(w.to(device=device, dtype=next(teacher.parameters()).dtype))
            return self.proj[name]

        t_layers, s_layers = layer_modules(self.teacher, self.family), layer_modules(self.student, self.family)
        for i, (tl, sl) in enumerate(zip(t_layers, s_layers)):
            shared = {}
            for m in ("q", "k", "v", "gate", "up", "o", "down"):
                if m not in tl:
                    continue
                key = m
                if config.share_qkv_gate_up and m in ("k", "v"):
                    key = "q"
                if config.share_qkv_gate_up and m == "up" and "gate" in tl:
                    key = "gate"
                if key not in shared:
                    shared[key] = new(f"{m}_{i}")
                p = shared[key]
                side = "out" if m in WRITERS else "in"
                _project(sl[m], "weight", tl[m].weight, p, side)
                if tl[m].bias is not None:
                    if side == "out":
                        _project(sl[m], "bias", tl[m].bias, p, "out")
                    else:
                        sl[m].bias.data.copy_(tl[m].bias.data)
            for tn, sn in zip(tl["norms"], sl["norms"]):
                self._init_norm(tn, sn)
        if self.family == "llama":
            p_emb = new("emb")
            self.student.model.embed_tokens = ProjectedEmbedding(self.teacher.model.embed_tokens, p_emb)
            p_lm = p_emb if config.tie_word_emb_proj else new("lm")
            _project(self.student.lm_head, "weight", self.teacher.lm_head.weight, p_lm, "in")
            self._init_norm(self.teacher.model.norm, self.student.model.norm)
        else:
            p_emb = new("emb")
            te, se = self.teacher.embeddings, self.student.embeddings
            for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
                setattr(se, name, ProjectedEmbedding(getattr(te, name), p_emb))
            self._init_norm(te.LayerNorm, se.LayerNorm)
        if self.family == "bert" and getattr(self.student, "pooler", None) is not None:
            self.student.pooler = None
        self.student.train()

    def _init_norm(self, t_norm, s_norm):
        with torch.no_grad():
            if self.config.norm_init == "teacher":
                s_norm.weight.copy_(t_norm.weight)
                if getattr(s_norm, "bias", None) is not None:
                    s_norm.bias.copy_(t_norm.bias)
            else:
                s_norm.weight.fill_(1.0)
                if getattr(s_norm, "bias", None) is not None:
                    s_norm.bias.zero_()
        for p in s_norm.parameters():
            p.requires_grad_(True)

    # ------------------------------------------------------------------------------------------
    def trainable_parameters(self) -> list[nn.Parameter]:
        """The projections and the student's norm gains (and LayerNorm biases for BERT)."""
        seen, out = set(), []
        for p in list(self.proj.values()) + [p for p in self.student.parameters() if p.requires_grad]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.trainable_parameters())

    def projection(self, layer: int, module: str) -> torch.Tensor:
        """The (possibly shared) projection behind ``module`` of ``layer`` (``"emb"``/``"lm"``: layer ignored)."""
        if module in ("emb", "lm"):
            key = "lm" if module == "lm" and "lm" in self.proj else "emb"
            return self.proj[key]
        sl = layer_modules(self.student, self.family)[layer]
        if module not in sl:
            raise ParameterError("module", module, f"one of {[m for m in sl if m != 'norms']}")
        return sl[module].parametrizations["weight"][0].proj

    def forward(self, input_ids, attention_mask=None, *, teacher_out=None):
        terms = set(self.config.clone_terms)
        t_caps, s_caps = _Capture(self.teacher, self.family), _Capture(self.student, self.family)
        with t_caps, torch.no_grad():
            t_out = self.teacher(input_ids=input_ids, attention_mask=attention_mask)
        with s_caps:
            s_out = self.student(input_ids=input_ids, attention_mask=attention_mask)
        mask = attention_mask
        clone = {}
        t_layers = layer_modules(self.teacher, self.family)
        for i in range(len(t_layers)):
            t, s = t_caps.layers[i], s_caps.layers[i]
            for m in ("q", "k", "v", "gate", "up"):
                if m in terms and m in s:
                    clone[(i, m)] = masked_mse(s[m], t[m], mask)
            if "attn_out" in terms:
                if self.config.attn_out_width == "student":
                    target = t["o"] @ self.projection(i, "o")
                    clone[(i, "attn_out")] = masked_mse(s["o"], target, mask)
                else:  # official code: compare before the projection, in the teacher's width
                    o_t = t_layers[i]["o"]
                    clone[(i, "attn_out")] = masked_mse(F.linear(s["o_in"], o_t.weight, o_t.bias), t["o"], mask)
            if "ffn_out" in terms:
                target = t["down"] @ self.projection(i, "down")
                clone[(i, "ffn_out")] = masked_mse(s["down"], target, mask)
        return {"student": s_out, "teacher": t_out, "clone": clone}

    def clone_loss(self, clone: dict) -> torch.Tensor:
        """Σ over layers and terms of the per-term MSE (paper Eq. 6; the code's sum of ``nn.MSELoss``)."""
        if not clone:
            return torch.zeros(())
        return torch.stack(list(clone.values())).sum()


class _Capture:
    """Forward hooks recording each layer's q, k, v, gate, up, o (output and input) and down outputs."""

    def __init__(self, model, family):
        self.mods = layer_modules(model, family)
        self.layers = [dict() for _ in self.mods]
        self.handles = []

    def __enter__(self):
        for i, mods in enumerate(self.mods):
            for m, mod in mods.items():
                if m == "norms":
                    continue
                self.handles.append(mod.register_forward_hook(self._hook(i, m)))
        return self

    def _hook(self, i, m):
        def fn(_mod, inputs, output):
            self.layers[i][m] = output
            if m == "o":
                self.layers[i]["o_in"] = inputs[0]
        return fn

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        return False


def masked_mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``nn.MSELoss()`` (mean over every element); with a ``[B, L]`` mask, the mean over kept tokens."""
    if a.shape != b.shape:
        raise ValueError(f"clone pair shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    if mask is None:
        return F.mse_loss(a, b)
    w = mask.to(a.dtype).unsqueeze(-1)
    return ((a - b) ** 2 * w).sum() / (w.sum() * a.shape[-1]).clamp_min(1.0)


def kd_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 40.0,
          t2: bool = False) -> torch.Tensor:
    """KL(teacher ‖ student) at temperature T, as the official code: ``F.kl_div(log_softmax(s/T),
    log_softmax(t/T), log_target=True, reduction="batchmean")`` (sum over tokens and vocabulary divided
    by the batch size), times T² if ``t2``."""
    check_float("temperature", temperature, lo=0.0, lo_open=True)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"logit shapes differ: {tuple(student_logits.shape)} vs {tuple(teacher_logits.shape)}")
    kl = F.kl_div(F.log_softmax(student_logits / temperature, dim=-1), F.log_softmax(teacher_logits / temperature, dim=-1),
                  log_target=True, reduction="batchmean")
    return kl * temperature ** 2 if t2 else kl


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy (shifted)."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return hidden.mean(1)
    w = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1.0)


def cosine_matrix(emb: torch.Tensor) -> torch.Tensor:
    e = F.normalize(emb, dim=-1)
    return e @ e.t()


def sentence_loss(student_hidden, teacher_hidden, mask=None) -> torch.Tensor:
    """Encoder stand-in for L_LM + L_KL (deviation): MSE between the in-batch pairwise-cosine matrices of
    the mean-pooled student and teacher sentence embeddings. Width-free, so it needs no alignment
    matrix, and it targets what the evaluation measures (the geometry of sentence embeddings)."""
    return F.mse_loss(cosine_matrix(mean_pool(student_hidden, mask)), cosine_matrix(mean_pool(teacher_hidden, mask)).detach())


def lrc_loss(lrc: LowRankClone, input_ids, attention_mask=None) -> tuple[torch.Tensor, dict]:
    """L = L_LM + L_KL + α L_clone (causal teacher) or L_sent + α L_clone (encoder); returns (loss, parts)."""
    out = lrc(input_ids, attention_mask)
    cfg = lrc.config
    clone = lrc.clone_loss(out["clone"])
    if lrc.family == "llama":
        s_logits, t_logits = out["student"].logits, out["teacher"].logits
        task = lm_loss(s_logits, input_ids) + kd_kl(s_logits, t_logits, cfg.temperature, cfg.kl_t2)
    else:
        task = sentence_loss(out["student"].last_hidden_state, out["teacher"].last_hidden_state, attention_mask)
    loss = task + cfg.alpha * clone
    parts = {"task": task.item(), "clone": clone.item(),
             "terms": {(i, m): v.item() for (i, m), v in out["clone"].items()}}
    if lrc.family == "llama":
        parts["lm"] = float(lm_loss(out["student"].logits.detach(), input_ids))
    return loss, parts


# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def merge(lrc: LowRankClone, config: LRCConfig | None = None) -> nn.Module:
    """A standalone student (``LlamaForCausalLM`` or ``BertModel``) with the projections merged in
    (the official ``merge_weight`` / ``convert_ckpt.py``). ``config``, if given, must equal the one the
    student was trained with: merging with other flags raises ``ParameterError``.

    A merged Llama student is a plain ``LlamaForCausalLM`` (``config.head_dim`` keeps the teacher's head
    size). A merged BERT student keeps 12 heads of 32 at width d_S, which ``BertConfig`` cannot express
    (it derives the head size as hidden_size / heads): it is a ``BertModel`` in memory, and reloading a
    saved copy needs :func:`student_like`'s attention rebuild (``config.lrc_head_dim`` records the size)."""
    if config is not None and config != lrc.config:
        diff = {k: (v, getattr(config, k)) for k, v in lrc.config.as_dict().items()
                if v != (list(getattr(config, k)) if k == "clone_terms" else getattr(config, k))}
        raise ParameterError("config", diff, "the LRCConfig the student was trained with (training and merging read one config)")
    student = student_like(lrc.teacher, lrc.config.d_student)
    for name, mod in student.named_modules():
        src = lrc.student.get_submodule(name)
        for pname, p in mod.named_parameters(recurse=False):
            p.copy_(getattr(src, pname))  # a parametrized attribute evaluates W_T P
    for p in student.parameters():
        p.requires_grad_(False)
    student.config.lrc = lrc.config.as_dict()
    return student.eval()


def selection_projection(importance: torch.Tensor, d_student: int) -> torch.Tensor:
    """Hard width pruning as a projection: the 0/1 ``[d_T, d_S]`` matrix keeping the ``d_S`` channels of
    largest importance (in their original order). With it, W_T P is Minitron's column slice."""
    d_t = importance.numel()
    check_int("d_student", d_student, lo=1, hi=d_t)
    keep = torch.topk(importance, d_student).indices.sort().values
    p = torch.zeros(d_t, d_student, dtype=importance.dtype)
    p[keep, torch.arange(d_student)] = 1.0
    return p


def set_projections(lrc: LowRankClone, p: torch.Tensor) -> None:
    """Set every projection to ``p`` (identity for the equivalence check, a selection for pruning)."""
    with torch.no_grad():
        for v in lrc.proj.values():
            v.copy_(p.to(v.dtype))


def lemma1_gap(d_t: int = 24, d_s: int = 8, d_ff: int = 40, n: int = 16, seed: int = 0) -> float:
    """Lemma 1 on random matrices: a SwiGLU teacher FFN with random weights and the LRC student FFN
    (``W^S = W^T P``, ``P_gate = P_up = P_in``, ``W^S_down = P_downᵀ W^T_down``); a teacher input in the span of P_in
    (``x_T = z P_inᵀ``) gives the student input ``z`` exactly cloned gate and up activations
    (``z P_inᵀ W_upᵀ = x_T W_upᵀ``), and then the student FFN output equals ``o^T_ffn W^p_down``.
    Returns the max abs deviation (float64)."""
    g = torch.Generator().manual_seed(seed)
    w_gate, w_up = torch.randn(d_ff, d_t, generator=g, dtype=torch.float64), torch.randn(d_ff, d_t, generator=g, dtype=torch.float64)
    w_down = torch.randn(d_t, d_ff, generator=g, dtype=torch.float64)
    p_in, p_down = torch.randn(d_t, d_s, generator=g, dtype=torch.float64), torch.randn(d_t, d_s, generator=g, dtype=torch.float64)
    z = torch.randn(n, d_s, generator=g, dtype=torch.float64)
    x_t = z @ p_in.t()
    h_gate_t, h_up_t = x_t @ w_gate.t(), x_t @ w_up.t()
    o_t = (F.silu(h_gate_t) * h_up_t) @ w_down.t()
    h_gate_s, h_up_s = z @ (w_gate @ p_in).t(), z @ (w_up @ p_in).t()
    o_s = (F.silu(h_gate_s) * h_up_s) @ (p_down.t() @ w_down).t()
    clone_gap = max(float((h_gate_s - h_gate_t).abs().max()), float((h_up_s - h_up_t).abs().max()))
    return max(clone_gap, float((o_s - o_t @ p_down).abs().max()))


__all__ = [
    "ATTN_TERMS", "FAMILIES", "FFN_TERMS", "IDENTITY_TOL", "TERMS", "LRCConfig", "LowRankClone", "ProjectFromTeacher", "cosine_matrix",
    "family_of", "kd_kl", "layer_modules", "lemma1_gap", "lm_loss", "lrc_loss", "masked_mse", "mean_pool", "merge",
    "selection_projection", "sentence_loss", "set_projections", "student_like",
]
