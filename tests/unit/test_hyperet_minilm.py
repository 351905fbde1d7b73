"""The cached prompt embeddings equal a live all-MiniLM-L6-v2 run; our pooling equals sentence-transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.hyperet.data import embed_prompts, embed_texts, load_prompt_embeddings, prompts


@pytest.fixture(scope="module")
def minilm():
    from companion.models import load_minilm

    return load_minilm()


def test_cache_matches_live_minilm(minilm):
    tok, model = minilm
    for task in ("digits", "shapes"):
        live, cached = embed_prompts(task, tok, model), load_prompt_embeddings(task)
        for level in prompts(task):
            torch.testing.assert_close(live[level], cached[level], rtol=1e-4, atol=1e-5)


def test_pooling_matches_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    from companion.models.loading import minilm_path

    texts = prompts("digits")["fine"][:4] + ["a much longer sentence that pads the others in its batch"]
    ours = embed_texts(texts, *minilm)
    ref = torch.as_tensor(st.SentenceTransformer(str(minilm_path()), device="cpu").encode(texts))
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)


def test_build_prompt_cache_writes_atomically_to_the_given_name(minilm, tmp_path):
    from companion.hyperet.data import CACHE_PATH, build_prompt_cache

    path = build_prompt_cache(tmp_path / "cache.npz")
    assert path == tmp_path / "cache.npz" and sorted(p.name for p in tmp_path.iterdir()) == ["cache.npz"]  # no .npz.npz, no temp left
    with np.load(path) as new, np.load(CACHE_PATH) as old:
        assert sorted(new.files) == sorted(old.files)
        np.testing.assert_allclose(new["digits/fine"], old["digits/fine"], atol=1e-4)
