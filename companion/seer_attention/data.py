"""Offline text for SeerAttention's self-distillation: full-length windows of real text.

The paper distils on RedPajama in 64k-token chunks. Here the text is the docstrings of Python's
standard library (``companion.models.stdlib_texts``), which ship with every Python. Windows are
packed to the full length (no padding: the block-sparse op has no padding mask), and the held-out
windows are cut from docstrings that the training windows never see, so the held-out split is fixed
and disjoint for a given seed.
"""

from __future__ import annotations

import torch

from companion.core.validation import ParameterError, check_int


def _pack(chunks: list[list[int]], length: int, count: int, prefix: list[int], suffix: list[int]) -> list[list[int]]:
    body = length - len(prefix) - len(suffix)
    stream = [t for c in chunks for t in c]
    if len(stream) < body * count:
        raise ParameterError("n_windows", count, f"at most {len(stream) // max(body, 1)} windows of {length} tokens from this text")
    return [prefix + stream[i * body:(i + 1) * body] + suffix for i in range(count)]


def text_windows(
    tokenizer,
    n_train: int,
    n_test: int,
    seq_len: int = 512,
    *,
    seed: int = 0,
    min_chars: int = 400,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train_ids [n_train, seq_len], test_ids [n_test, seq_len])`` from stdlib docstrings.

    Each window is ``[CLS] tokens... [SEP]`` for a BERT tokenizer (the way MiniLM was trained), a
    plain token stream otherwise. Training windows come from the first docstrings of the shuffled
    list and held-out windows from the last ones, so no docstring is in both splits.
    """
    check_int("n_train", n_train, lo=1)
    check_int("n_test", n_test, lo=1)
    check_int("seq_len", seq_len, lo=8)
    texts = _all_texts(min_chars, seed)
    ids = [tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"] for t in texts]
    prefix = [tokenizer.cls_token_id] if getattr(tokenizer, "cls_token_id", None) is not None else []
    suffix = [tokenizer.sep_token_id] if getattr(tokenizer, "sep_token_id", None) is not None else []
    body = seq_len - len(prefix) - len(suffix)
    # held-out: take docstrings from the end until they cover n_test windows
    need, test_chunks = body * n_test, []
    while ids and sum(map(len, test_chunks)) < need:
        test_chunks.append(ids.pop())
    test = _pack(test_chunks, seq_len, n_test, prefix, suffix)
    train = _pack(ids, seq_len, n_train, prefix, suffix)
    return torch.tensor(train, dtype=torch.long), torch.tensor(test, dtype=torch.long)


def _all_texts(min_chars: int, seed: int) -> list[str]:
    from companion.models import stdlib_texts

    return stdlib_texts(None, min_chars=min_chars, seed=seed)


def byte_windows(n: int, seq_len: int, *, seed: int = 0, min_chars: int = 200) -> torch.Tensor:
    """``[n, seq_len]`` byte-level token ids (vocabulary 256) of stdlib docstrings, for the tiny
    decoders (which have a 256-token vocabulary). The text stream repeats when it is shorter than
    ``n * seq_len`` (long-context runs on the GPU need more bytes than the docstrings hold); every
    window starts at a different offset."""
    check_int("n", n, lo=1)
    check_int("seq_len", seq_len, lo=1)
    data = "\n\n".join(_all_texts(min_chars, seed)).encode("utf-8")
    stream = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    total = n * seq_len
    reps = -(-total // stream.numel()) + 1
    stream = stream.repeat(reps)
    step = max(1, (stream.numel() - seq_len) // n)
    return torch.stack([stream[i * step:i * step + seq_len] for i in range(n)])
