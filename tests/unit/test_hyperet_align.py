"""Alignment experiment of companion.hyperet (tiny sizes): structure, the Euclidean-twin coincidence, data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.core import ParameterError
from companion.hyperet.align import DEFAULT_VARIANTS, AlignConfig, run_alignment, summary_rows
from companion.hyperet.data import LOOP_DIGITS, digits_task, load_prompt_embeddings, prompts, shapes_task


@pytest.fixture(scope="module")
def tiny_run():
    task = digits_task()
    text = load_prompt_embeddings("digits")
    cfg = AlignConfig(dim=16, depth=1, heads=2, pretrain_level="coarse", pretrain_steps=15, align_steps=12, batch=32, eval_every=6)
    return run_alignment(task, text, cfg)


def test_every_variant_runs_and_reports(tiny_run):
    rows = summary_rows(tiny_run)
    assert [r["variant"] for r in rows] == DEFAULT_VARIANTS
    for r in rows:
        for lv in ("fine", "mid", "coarse"):
            assert 0.0 <= r[f"acc_{lv}"] <= 1.0
    by = {r["variant"]: r for r in rows}
    assert by["projector only"]["trainable_params"] == 0
    assert by["full fine-tune"]["trainable_share_%"] == pytest.approx(100.0)
    assert by["HRA diag (q,v)"]["trainable_params"] == 1 * 2 * 16
    assert by["HRA block 4x4 (q,v)"]["trainable_params"] == 1 * 2 * 16 * 4
    assert by["HRA banded d=2 (q,v)"]["trainable_params"] == 2 * (16 * 5 - 6)
    # the frozen encoder's tokens are unchanged when only the projector trains
    assert by["projector only"]["cls_Rad_after"] == pytest.approx(by["projector only"]["cls_Rad_before"])
    assert len(tiny_run["results"]["HRA diag (q,v)"]["curve"]) == 2


def test_hra_diag_and_euclidean_twin_coincide(tiny_run):
    res = tiny_run["results"]
    a, b = np.array(res["Euclidean diag (q,v)"]["losses"]), np.array(res["HRA diag (q,v)"]["losses"])
    assert np.abs(a - b).max() < 1e-5
    wa = res["Euclidean diag (q,v)"]["encoder"].blocks[0].attn.qv_adapter.adapter_q.weight
    wb = res["HRA diag (q,v)"]["encoder"].blocks[0].attn.qv_adapter.adapter_q.weight
    assert not torch.equal(wa, torch.ones_like(wa))  # it did train
    torch.testing.assert_close(wa, wb, rtol=1e-4, atol=1e-5)


def test_config_validation():
    with pytest.raises(ParameterError, match="pretrain_level"):
        AlignConfig(pretrain_level="finest").validate()
    with pytest.raises(ParameterError, match="variant"):
        AlignConfig(variants=["HRA hexagonal"]).validate()
    with pytest.raises(ParameterError, match="c="):
        AlignConfig(c=0).validate()


def test_digit_labels_are_consistent():
    task = digits_task()
    for y in (task.y_train, task.y_test):
        assert torch.equal(y["mid"], y["fine"] % 2)
        loop = torch.tensor([int(d) in LOOP_DIGITS for d in y["fine"]])
        assert torch.equal(y["coarse"] == 0, loop)
    assert len(task.x_train) + len(task.x_test) == 1797
    assert task.x_train.min() >= 0 and task.x_train.max() <= 1


def test_shapes_form_a_hierarchy():
    task = shapes_task(n=240, size=16)
    y = task.y_train
    assert torch.equal(y["fine"] // 3, y["mid"])
    assert torch.equal((y["mid"] >= 3).long(), y["coarse"])
    assert task.x_train.shape[1:] == (3, 16, 16)
    for level, texts in prompts("shapes").items():
        assert len(texts) == int(y[level].max()) + 1 or len(texts) >= int(y[level].max()) + 1


def test_prompt_cache_has_every_level():
    for task in ("digits", "shapes"):
        emb = load_prompt_embeddings(task)
        for level, texts in prompts(task).items():
            assert emb[level].shape == (len(texts), 384)
            torch.testing.assert_close(emb[level].norm(dim=-1), torch.ones(len(texts)), rtol=1e-5, atol=1e-5)
