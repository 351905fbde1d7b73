"""The GPT-2 of paper 06: its configuration and builder (data, loss, training, decoding and checkpoints
live in :mod:`.data`, :mod:`.loss`, :mod:`.training`, :mod:`.decoding` and :mod:`.checkpoints`).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023); official code
``dfs_approach/sudoku`` (minGPT decoder, 8 layers, 8 heads, d = 576, FFN 6d, dropout 0.1, 1000
learned positions, vocabulary 1001, untied output head; AdamW lr 1e-4, betas (0.9, 0.95), weight
decay 0.1 on linear weights, 5 warm-up steps then linear decay, gradient clip 1.0, batch 32, 3M steps).

**Model.** transformers' ``GPT2LMHeadModel`` from the project's shared builder
:func:`companion.models.tiny_gpt2` (no weights downloaded), then set to the official minGPT's
choices: an untied output head (initialised N(0, 0.02) like every linear layer), exact GELU, the
configured dropout (0 here) and SDPA attention. Sizes are parameters: the CPU notebook uses 2 layers,
8 heads, d = 128 (4x4); the GPU script 8 layers, 16 heads, d = 256, FFN 4d (9x9). Many small heads
trained markedly faster than fewer wide ones in the 4x4 runs. The FFN width is always 4d (the shared
builder's; the paper's is 6d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from companion.core import ParameterError, check_float, check_int
from companion.sudoku_dfs.board import VOCAB_SIZE

__all__ = ["GPTConfig", "build_model", "n_parameters"]


@dataclass
class GPTConfig:
    """Sizes of the decoder (``n_positions`` bounds the transcript length)."""

    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    n_inner: int | None = None  # None or 4 * n_embd (the shared builder's FFN width)
    n_positions: int = 128
    dropout: float = 0.0
    tie_embeddings: bool = False  # the official minGPT has an untied output head

    def check(self) -> "GPTConfig":
        check_int("n_layer", self.n_layer, lo=1, hi=48)
        check_int("n_head", self.n_head, lo=1, hi=64)
        check_int("n_embd", self.n_embd, lo=8, hi=4096)
        check_int("n_positions", self.n_positions, lo=16, hi=4096)
        check_float("dropout", self.dropout, lo=0.0, hi=1.0, hi_open=True)
        if self.n_embd % self.n_head:
            raise ParameterError("n_embd", self.n_embd, f"a multiple of n_head={self.n_head}")
        if self.n_inner is not None and self.n_inner != 4 * self.n_embd:
            raise ParameterError("n_inner", self.n_inner, f"None or 4 * n_embd = {4 * self.n_embd}")
        return self


def build_model(config: GPTConfig, seed: int = 0):
    """A randomly initialised GPT-2 over the 1001-token vocabulary, from :func:`companion.models.tiny_gpt2`
    with the official code's untied head, exact GELU and ``config.dropout``; in eval mode."""
    from transformers.activations import ACT2FN

    from companion.models import tiny_gpt2

    config.check()
    model = tiny_gpt2(vocab_size=VOCAB_SIZE, n_embd=config.n_embd, n_layer=config.n_layer, n_head=config.n_head,
                      n_positions=config.n_positions, seed=seed)
    hf = model.config
    for block in model.transformer.h:
        block.mlp.act = ACT2FN["gelu"]  # exact GELU, as the official minGPT's nn.GELU()
    hf.activation_function = "gelu"
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = config.dropout
    hf.resid_pdrop = hf.embd_pdrop = hf.attn_pdrop = config.dropout
    if not config.tie_embeddings:
        generator = torch.Generator().manual_seed(seed + 1)
        head = torch.empty_like(model.lm_head.weight).normal_(0.0, hf.initializer_range, generator=generator)
        model.lm_head.weight = torch.nn.Parameter(head)
        hf.tie_word_embeddings = False
    model.set_attn_implementation("sdpa")
    model.sudoku_config = config
    return model.eval()


def n_parameters(model) -> int:
    """The number of distinct parameters (a tied head counts once)."""
    return sum(p.numel() for p in model.parameters())
