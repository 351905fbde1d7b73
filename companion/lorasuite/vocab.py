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
of their frequent words, several thousand tokens. :func:`gpu_vocabs` makes the GPU profile's pair and
:func:`check_shared_tokens` refuses, before any training, a pair sharing fewer than d_old tokens.
"""

from __future__ import annotations

import re
import sysconfig
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, check_choice, check_int

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


def local_source(exclude=(), max_bytes: int = 30_000_000) -> str:
    """The standard library's .py source (sorted files, test folders and the ``exclude`` packages left out), tabs
    as four spaces, until ``max_bytes`` characters."""
    from companion.models.texts import stdlib_source_files

    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for p in stdlib_source_files(skip_tests=True):
        rel = p.relative_to(root).parts
        if "tests" in rel or rel[0] in exclude:
            continue
        out.append(p.read_text(encoding="utf-8", errors="replace").replace("\t", "    "))
        total += len(out[-1])
        if total >= max_bytes:
            break
    return "\n".join(out)


def gpu_vocabs(profile: dict):
    """The (old, new) word-level vocabularies of a GPU profile and the pre-training text they were counted on
    (:func:`upgrade_vocabs` on ``text_bytes`` of :func:`local_source` without the ``task`` package, the new one
    also on the docstrings), without any model."""
    from companion.lorasuite.fixture import TASKS
    from companion.models import stdlib_texts

    task = check_choice("task", profile["task"], TASKS)
    text = local_source(exclude=(task,), max_bytes=profile["text_bytes"])
    vo, vn = upgrade_vocabs(text, profile["vocab"]["old"], profile["vocab"]["new"], extra_new_text="\n".join(stdlib_texts()))
    return vo, vn, text


def check_shared_tokens(vo, vn, d_old: int) -> int:
    """The number of shared tokens; a clear error (before any training) when it is below d_old, where
    W_h = E_o[c]⁺ E_n[c] cannot be full rank."""
    from companion.lorasuite.transfer_matrix import common_tokens

    n = len(common_tokens(vo.get_vocab(), vn.get_vocab())[0])
    if n < d_old:
        raise ParameterError("shared tokens", n, f"at least d_old = {d_old} tokens in both vocabularies for a full-rank W_h")
    return n
