"""Toy multi-granularity vision-language data for the HyperET companion (not from the paper).

The paper aligns CLIP's visual tokens with language at several granularities (objects → parts →
attributes). Offline and on a CPU we build the same structure small:

* ``digits`` — scikit-learn's bundled ``load_digits`` (1,797 images, 8×8, 17 grey levels). Three
  granularities of text prompts: **fine** (the digit, 10 classes: "a handwritten digit seven"),
  **mid** (parity, 2: "an odd digit"), **coarse** (shape, 2: "a digit drawn with a closed loop" for
  0, 6, 8, 9, else "a digit drawn with open strokes only").
* ``shapes`` — procedurally generated 32×32 RGB images for the GPU run, a true hierarchy:
  **coarse** family (round / angular) → **mid** shape (circle, ring, ellipse / square, triangle,
  cross) → **fine** shape and colour (red, green, blue; 18 classes).

Text prompts are embedded by the real pretrained all-MiniLM-L6-v2 (mean pooling over tokens, then L2
normalisation, as its sentence-transformers configuration specifies). The embeddings are also cached
in ``prompt_embeddings.npz`` beside this file so the GPU script (whose machine has neither the MiniLM
package nor the weights) uses the same vectors; :func:`build_prompt_cache` regenerates the file and a
unit test checks the cache against a live MiniLM run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from companion.core.atomic import write_atomic
from companion.core.validation import ParameterError, check_choice, check_float, check_int

# A handful of prompts gains nothing from the tokenizers' Rust thread pool. With it enabled, papermill
# (ipykernel 7) intermittently waited forever on a widget cell after MiniLM had run; with it off it did
# not. Opt out before any tokenizer is loaded, unless the user chose otherwise (the Makefile exports
# TOKENIZERS_PARALLELISM=false as well).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LEVELS = ("fine", "mid", "coarse")
TASKS = ("digits", "shapes")
CACHE_PATH = Path(__file__).with_name("prompt_embeddings.npz")

_NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
LOOP_DIGITS = (0, 6, 8, 9)
SHAPES = ("circle", "ring", "ellipse", "square", "triangle", "cross")
ROUND_SHAPES = ("circle", "ring", "ellipse")
COLOURS = ("red", "green", "blue")
_RGB = {"red": (0.9, 0.15, 0.1), "green": (0.1, 0.75, 0.2), "blue": (0.15, 0.3, 0.95)}

__all__ = [
    "CACHE_PATH",
    "LEVELS",
    "LOOP_DIGITS",
    "TASKS",
    "Task",
    "build_prompt_cache",
    "digits_task",
    "embed_texts",
    "load_prompt_embeddings",
    "prompts",
    "shapes_task",
]


def prompts(task: str) -> dict[str, list[str]]:
    """The text prompts of each granularity level (index = class label at that level)."""
    check_choice("task", task, TASKS)
    if task == "digits":
        return {
            "fine": [f"a handwritten digit {w}" for w in _NUMBERS],
            "mid": ["an even digit", "an odd digit"],
            "coarse": ["a digit drawn with a closed loop", "a digit drawn with open strokes only"],
        }
    return {
        "fine": [f"a {col} {shape}" for shape in SHAPES for col in COLOURS],
        "mid": [f"a {shape}" for shape in SHAPES],
        "coarse": ["a round shape", "an angular shape"],
    }


@dataclass
class Task:
    """Images ``[N, C, H, W]`` in [0, 1] with a label per granularity level, split train/test."""

    name: str
    x_train: torch.Tensor
    x_test: torch.Tensor
    y_train: dict[str, torch.Tensor]
    y_test: dict[str, torch.Tensor]
    prompts: dict[str, list[str]]

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])

    def to(self, device) -> Task:
        mv = lambda d: {k: v.to(device) for k, v in d.items()}  # noqa: E731
        return Task(self.name, self.x_train.to(device), self.x_test.to(device), mv(self.y_train), mv(self.y_test), self.prompts)


def _split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return perm[n_test:], perm[:n_test]


def digits_task(test_fraction: float = 1 / 3, seed: int = 0) -> Task:
    """scikit-learn's digits with fine / mid / coarse labels (see module docstring)."""
    from sklearn.datasets import load_digits

    check_float("test_fraction", test_fraction, lo=0.05, hi=0.9)
    check_int("seed", seed, lo=0)
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    fine = torch.tensor(data.target, dtype=torch.long)
    labels = {
        "fine": fine,
        "mid": fine % 2,
        "coarse": torch.tensor([0 if int(d) in LOOP_DIGITS else 1 for d in fine], dtype=torch.long),
    }
    tr, te = _split(len(x), test_fraction, seed)
    tr, te = torch.from_numpy(tr), torch.from_numpy(te)
    return Task("digits", x[tr], x[te], {k: v[tr] for k, v in labels.items()}, {k: v[te] for k, v in labels.items()}, prompts("digits"))


def _shape_masks(shape_idx: torch.Tensor, size: int, gen: torch.Generator, device) -> torch.Tensor:
    """Binary masks [N, size, size] of the requested shapes at random position, scale and rotation."""
    n = shape_idx.numel()
    rnd = lambda *s: torch.rand(*s, generator=gen, device=device)  # noqa: E731
    cx = size / 2 + (rnd(n) - 0.5) * size * 0.25
    cy = size / 2 + (rnd(n) - 0.5) * size * 0.25
    r = size * (0.22 + 0.14 * rnd(n))
    th = rnd(n) * 2 * math.pi
    coords = torch.arange(size, device=device, dtype=torch.float32) + 0.5
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    dx = xx[None] - cx[:, None, None]
    dy = yy[None] - cy[:, None, None]
    cos, sin = th.cos()[:, None, None], th.sin()[:, None, None]
    u = cos * dx + sin * dy
    v = -sin * dx + cos * dy
    rr = r[:, None, None]
    dist = (dx**2 + dy**2).sqrt()
    masks = torch.stack(
        [
            dist < rr,  # circle
            (dist < rr) & (dist > 0.55 * rr),  # ring
            (u / rr) ** 2 + (v / (0.5 * rr)) ** 2 < 1,  # ellipse
            (u.abs() < 0.8 * rr) & (v.abs() < 0.8 * rr),  # square
            (v > -0.5 * rr) & (v < rr - 1.732 * u.abs() * 0.9),  # triangle (isosceles, apex up in the rotated frame)
            ((u.abs() < 0.28 * rr) & (v.abs() < rr)) | ((v.abs() < 0.28 * rr) & (u.abs() < rr)),  # cross
        ],
        dim=1,
    )
    return masks[torch.arange(n, device=device), shape_idx].float()


def shapes_task(n: int = 20000, size: int = 32, test_fraction: float = 0.2, seed: int = 0, device="cpu") -> Task:
    """Procedural hierarchical shapes (see module docstring), generated on ``device``."""
    check_int("n", n, lo=36)
    check_int("size", size, lo=12, hi=256)
    check_float("test_fraction", test_fraction, lo=0.05, hi=0.9)
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = torch.randint(0, len(SHAPES), (n,), generator=gen, device=device)
    colour = torch.randint(0, len(COLOURS), (n,), generator=gen, device=device)
    mask = _shape_masks(shape, size, gen, device)
    rgb = torch.tensor([_RGB[c] for c in COLOURS], device=device)[colour]  # [n, 3]
    rgb = (rgb + 0.08 * torch.randn(n, 3, generator=gen, device=device)).clamp(0, 1)
    background = 0.5 + 0.1 * torch.randn(n, 1, 1, 1, generator=gen, device=device)
    x = background * (1 - mask[:, None]) + rgb[:, :, None, None] * mask[:, None]
    x = (x + 0.05 * torch.randn(x.shape, generator=gen, device=device)).clamp(0, 1)
    labels = {
        "fine": shape * len(COLOURS) + colour,
        "mid": shape,
        "coarse": (shape >= len(ROUND_SHAPES)).long(),
    }
    tr, te = _split(n, test_fraction, seed)
    tr, te = torch.from_numpy(tr).to(device), torch.from_numpy(te).to(device)
    return Task("shapes", x[tr], x[te], {k: v[tr] for k, v in labels.items()}, {k: v[te] for k, v in labels.items()}, prompts("shapes"))


@torch.no_grad()
def embed_texts(texts: list[str], tokenizer, model, batch_size: int = 32) -> torch.Tensor:
    """Sentence embeddings [len(texts), hidden] of a BERT-like encoder: mean pooling, then L2 norm."""
    if not texts or not all(isinstance(t, str) and t for t in texts):
        raise ParameterError("texts", texts, "a non-empty list of non-empty strings")
    out = []
    for i in range(0, len(texts), batch_size):
        batch = tokenizer(texts[i : i + batch_size], padding=True, truncation=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        out.append(torch.nn.functional.normalize(pooled, dim=-1))
    return torch.cat(out).float()


def embed_prompts(task: str, tokenizer=None, model=None) -> dict[str, torch.Tensor]:
    """Live MiniLM embeddings of :func:`prompts` (loads all-MiniLM-L6-v2 when no model is given)."""
    if model is None:
        from companion.models import load_minilm

        tokenizer, model = load_minilm()
    return {level: embed_texts(texts, tokenizer, model) for level, texts in prompts(task).items()}


def load_prompt_embeddings(task: str) -> dict[str, torch.Tensor]:
    """Cached MiniLM prompt embeddings (``prompt_embeddings.npz``); no model needed."""
    check_choice("task", task, TASKS)
    if not CACHE_PATH.exists():
        raise FileNotFoundError(f"{CACHE_PATH} is missing; run companion.hyperet.data.build_prompt_cache() where MiniLM is installed")
    with np.load(CACHE_PATH, allow_pickle=False) as data:
        out = {}
        for level, texts in prompts(task).items():
            key = f"{task}/{level}"
            cached = [str(t) for t in data[key + "/texts"]]
            if cached != texts:
                raise ValueError(f"the cached prompts for {key} differ from prompts({task!r}); rebuild the cache with build_prompt_cache()")
            out[level] = torch.from_numpy(data[key]).float()
    return out


def build_prompt_cache(path: Path | None = None) -> Path:
    """Embed every task's prompts with MiniLM and write them to ``prompt_embeddings.npz`` atomically."""
    from companion.models import load_minilm

    tokenizer, model = load_minilm()
    arrays = {}
    for task in TASKS:
        for level, texts in prompts(task).items():
            arrays[f"{task}/{level}"] = embed_texts(texts, tokenizer, model).numpy().astype(np.float32)
            arrays[f"{task}/{level}/texts"] = np.array(texts)
    path = Path(path or CACHE_PATH)


    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez_compressed(f, **arrays)

    return write_atomic(path, write)
