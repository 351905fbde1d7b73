"""The transfer matrix W_h between the old and new hidden spaces (paper §3.1; code ``embedding_transformation``).

Over the tokens the two vocabularies share, with E_o[c] (n_c × d_o) and E_n[c] (n_c × d_n) the rows of the
input embeddings,

    W_h = argmin_W ‖E_o[c] W − E_n[c]‖_F = E_o[c]⁺ E_n[c]        (d_o × d_n, Moore-Penrose pseudo-inverse)

so that an old hidden vector h (a row) is carried into the new space as h W_h. The official code uses the
identity when the hidden size is unchanged (its Pythia and Qwen pairs); :func:`transfer_matrix` does the
same when asked (``identity_if_same=True``). The fit is reported as R² = 1 − ‖E_o W_h − E_n‖² / ‖E_n − mean‖².

A full-rank W_h needs E_o[c] of rank d_o, hence at least d_o shared tokens: fewer raise an error.

FFN (code, for ``up_proj``/``down_proj`` adapters): the intermediate spaces are linked by
W_i = W_up^{o,+} W_h W_up^{n,ᵀ} in nn.Linear layout (:func:`ffn_transfer_matrix`), the spec's
"W_o⁻¹ W_h W_n" read for up_proj.
"""

from __future__ import annotations

import torch

from companion.core import ParameterError


def common_tokens(vocab_old: dict, vocab_new: dict) -> tuple[list[int], list[int], list[str]]:
    """Indices of the tokens in both vocabularies (``{token: id}``), sorted by token for determinism."""
    for name, v in (("vocab_old", vocab_old), ("vocab_new", vocab_new)):
        if not isinstance(v, dict) or not v:
            raise ParameterError(name, type(v).__name__, "a non-empty {token: id} dict (tokenizer.get_vocab())")
    shared = sorted(set(vocab_old) & set(vocab_new))
    return [vocab_old[t] for t in shared], [vocab_new[t] for t in shared], shared


def transfer_matrix(E_old: torch.Tensor, E_new: torch.Tensor, idx_old, idx_new, identity_if_same: bool = False) -> dict:
    """W_h = pinv(E_old[idx_old]) @ E_new[idx_new] in float32 (float64 inside). Returns
    ``{"W_h": (d_o, d_n), "r2": fit R², "n_common": int, "rank": rank of E_old[common], "identity": bool}``."""
    if len(idx_old) != len(idx_new):
        raise ParameterError("idx_new", len(idx_new), f"as many indices as idx_old ({len(idx_old)})")
    Eo = E_old.detach().to(torch.float64)[list(idx_old)]
    En = E_new.detach().to(torch.float64)[list(idx_new)]
    d_o, d_n = Eo.shape[1], En.shape[1]
    if identity_if_same and d_o == d_n:
        W = torch.eye(d_o, dtype=torch.float64)
        rank = int(torch.linalg.matrix_rank(Eo)) if len(idx_old) else 0
    else:
        if len(idx_old) < d_o:
            raise ParameterError("common tokens", len(idx_old),
                                 f"at least d_old = {d_o} shared tokens for a full-rank W_h")
        rank = int(torch.linalg.matrix_rank(Eo))
        if rank < d_o:
            raise ParameterError("common tokens", len(idx_old),
                                 f"shared-token embeddings of full rank d_old = {d_o} (their rank is {rank})")
        W = torch.linalg.pinv(Eo) @ En
    resid = Eo @ W - En
    denom = ((En - En.mean(0)) ** 2).sum()
    r2 = float(1 - (resid ** 2).sum() / denom) if denom > 0 else float("nan")
    return {"W_h": W.to(torch.float32), "r2": r2, "n_common": len(idx_old), "rank": rank,
            "identity": bool(identity_if_same and d_o == d_n)}


def ffn_transfer_matrix(W_up_old: torch.Tensor, W_up_new: torch.Tensor, W_h: torch.Tensor) -> torch.Tensor:
    """W_i (f_o × f_n) = pinv(W_up_oldᵀ) W_h W_up_newᵀ: an old intermediate activation u_o = h W_up_oldᵀ
    maps to u_o W_i ≈ (h W_h) W_up_newᵀ."""
    return (torch.linalg.pinv(W_up_old.T.double()) @ W_h.double() @ W_up_new.T.double()).float()
