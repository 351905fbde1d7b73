"""Word-level vocabularies for the GPU profile of paper 12 (LoRASuite), built locally from standard-library text.

Why: W_h = E_o[c]⁺ E_n[c] (:mod:`~companion.lorasuite.transfer_matrix`) is well-posed only when the old
and new vocabularies share at least d_old tokens whose embeddings have rank d_old. The CPU fixture's
character vocabularies share 91 tokens, enough at d_old = 64 but not at the GPU profile's d_old = 768
(the first H200 run stopped there with a rank error). Real upgrades (MiniCPM-S-1B → MiniCPM-2B, Llama
2 → 3) share thousands of byte-pair tokens; this module gives the stand-in pair the same property.

A :class:`WordVocab` holds ``<unk>`` = 0, a character set (every text stays encodable: a piece missing
from the word list is spelled out in characters, unknown characters become ``<unk>``), then the most
frequent pieces of a counting text. Pieces are 4-space indents, runs of word characters (``\\w+``),
single punctuation marks and single whitespace characters (:data:`PIECE`). :func:`upgrade_vocabs` makes
a pair the way an upgrade does: the old vocabulary counted on the first half of a text, the new one,
larger and in a different order, on all of it plus the standard library's docstrings; they share most
of their frequent words, several thousand tokens.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import torch

from companion.core import ParameterError, check_int

PIECE = re.compile(r" {4}|\w+|[^\w\s]|\s")


def pieces(text: str) -> list[str]:
    """The pre-tokenisation of ``text`` (lossless: ``"".join(pieces(t)) == t``)."""
    return PIECE.findall(text)


class WordVocab:
    """``<unk>`` = 0, then ``chars`` (the fallback alphabet), then ``words`` (pieces of several characters);
    the same interface as the fixture's ``CharVocab`` (``len``, ``get_vocab``, ``encode``, ``tokens``, ``stoi``)."""

    def __init__(self, chars, words):
        chars = list(dict.fromkeys(chars))
        seen = set(chars)
        self.tokens = ["<unk>", *chars, *[w for w in dict.fromkeys(words) if w not in seen and w != "<unk>"]]
        self.stoi = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self):
        return len(self.tokens)

    def get_vocab(self) -> dict:
        return dict(self.stoi)

    def encode(self, text: str) -> torch.Tensor:
        get = self.stoi.get
        out: list[int] = []
        app, ext = out.append, out.extend
        for p in pieces(text):
            i = get(p)
            if i is None:
                ext([get(c, 0) for c in p])
            else:
                app(i)
        return torch.from_numpy(np.asarray(out, dtype=np.int64))


def word_vocab(text: str, size: int, chars, seed: int | None = None) -> WordVocab:
    """A :class:`WordVocab` of ``size`` tokens: ``chars`` plus the most frequent multi-character pieces of
    ``text`` (ties broken by the piece, so the result is deterministic); ``seed`` shuffles the word order."""
    check_int("size", size, lo=len(set(chars)) + 2)
    counts = Counter(p for p in pieces(text) if len(p) > 1)
    n_words = size - 1 - len(set(chars))
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_words]]
    if seed is not None:
        order = torch.randperm(len(words), generator=torch.Generator().manual_seed(seed)).tolist()
        words = [words[i] for i in order]
    return WordVocab(chars, words)


def upgrade_vocabs(text: str, old_size: int, new_size: int, extra_new_text: str = "", old_chars=None,
                   new_chars=None, seed: int = 12) -> tuple[WordVocab, WordVocab]:
    """(old, new) vocabularies of an upgrade: old from the first half of ``text``, new (``new_size``,
    shuffled by ``seed``) from all of ``text`` plus ``extra_new_text``. Character sets default to the
    fixture's (the old one lacks ``~ ^ ` |``, the new one ``$ @``)."""
    from companion.lorasuite.fixture import new_vocab, old_vocab

    if not text:
        raise ParameterError("text", "empty", "a non-empty counting text")
    old_chars = old_chars if old_chars is not None else old_vocab().tokens[1:]
    new_chars = new_chars if new_chars is not None else new_vocab(seed).tokens[1:]
    vo = word_vocab(text[: len(text) // 2], old_size, old_chars)
    vn = word_vocab(text + "\n" + extra_new_text, new_size, new_chars, seed=seed)
    return vo, vn


def shared_count(vo, vn) -> int:
    return len(set(vo.get_vocab()) & set(vn.get_vocab()))
