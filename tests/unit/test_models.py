import math

import pytest
import torch

from companion.models import (
    ModelUnavailableError,
    capture_attention,
    load_minilm,
    load_model,
    stdlib_texts,
    tiny_gpt2,
    tiny_llama,
)


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def test_minilm_is_the_real_pretrained_model(minilm):
    tokenizer, model = minilm
    assert model.config.num_hidden_layers == 6 and model.config.num_attention_heads == 12
    enc = tokenizer(["A cat sits on the mat.", "A kitten rests on a rug.", "Stock prices fell sharply."],
                    return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1)
    emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    # Pretrained sentence embeddings: paraphrases are far closer than unrelated sentences.
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.3


def test_captured_qk_reproduce_the_captured_attention(minilm):
    tokenizer, model = minilm
    enc = tokenizer(stdlib_texts(2, min_chars=300), return_tensors="pt", padding=True, truncation=True, max_length=64)
    with torch.no_grad(), capture_attention(model) as cap:
        model(**enc)
    assert cap.num_layers == 6
    q, k, probs = cap.q[2], cap.k[2], cap.probs[2]
    assert q.shape == (2, 12, enc["input_ids"].shape[1], 32)
    bias = (1 - enc["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
    recomputed = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(32) + bias, dim=-1)
    torch.testing.assert_close(recomputed, probs, atol=1e-5, rtol=1e-4)


def test_tiny_llama_capture_with_gqa():
    model = tiny_llama(hidden_size=64, num_heads=4, num_kv_heads=2, num_layers=2)
    with torch.no_grad(), capture_attention(model) as cap:
        model(torch.randint(0, 256, (1, 17)))
    assert cap.q[0].shape == (1, 4, 17, 16) and cap.k[0].shape == (1, 2, 17, 16)
    assert torch.allclose(cap.probs[1].sum(-1), torch.ones(1, 4, 17))
    assert torch.all(cap.probs[1].triu(1) == 0)  # causal


def test_builders_validate():
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        tiny_llama(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="n_embd"):
        tiny_gpt2(n_embd=30, n_head=4)
    assert tiny_gpt2(n_layer=1).config.n_layer == 1


def test_offline_loader_refuses_downloads_clearly(tmp_path):
    with pytest.raises(ModelUnavailableError, match="not available offline"):
        load_model("some-org/some-model-that-is-not-here")
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        load_model(str(tmp_path / "missing"))


def test_loader_takes_a_local_folder(tmp_path):
    tokenizer, model = load_minilm()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _, again = load_model(str(tmp_path))
    assert type(again).__name__ == "BertModel"


def test_half_copy_upcast_matches_the_original(tmp_path, minilm):
    """The float16 copy (what a machine without the package loads), upcast to float32 on load, gives the same
    mean-pooled, L2-normalised sentence embeddings as the float32 original to 1e-3."""
    from companion.models.loading import save_half_copy

    folder = save_half_copy(tmp_path / "half")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {f.name for f in folder.iterdir()}
    tokenizer, model = minilm
    _, half = load_model(str(folder), dtype="float32")
    assert next(half.parameters()).dtype == torch.float32
    batch = tokenizer(["the answer is red", "where does anna live ?", "two"], return_tensors="pt", padding=True)
    with torch.no_grad():
        a, b = (torch.nn.functional.normalize((m(**batch).last_hidden_state * batch["attention_mask"][..., None]).sum(1), dim=-1)
                for m in (model, half))
    assert (a - b).abs().max().item() < 1e-3
    with pytest.raises(ValueError, match="dtype"):
        load_model(str(folder), dtype="float8")


def test_capture_refuses_models_without_qk():
    with pytest.raises(ValueError, match="cannot capture the attention of a Sequential"):
        with capture_attention(torch.nn.Sequential(torch.nn.Linear(2, 2))):
            pass


def test_capture_output_equals_the_models_own_attention():
    """The capture replaces attention by probs @ v: the model's output must not change (causal, GQA)."""
    model = tiny_llama(hidden_size=64, num_heads=4, num_kv_heads=2, num_layers=2).eval()
    ids = torch.randint(0, 256, (2, 19), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).logits
        with capture_attention(model) as cap:
            got = model(ids).logits
        again = model(ids).logits  # the implementation is restored afterwards
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again, want, atol=0, rtol=0)
    assert cap.num_layers == 2


def test_capture_refuses_padding_masks(minilm):
    tokenizer, model = minilm
    enc = tokenizer(["short", "a much longer sentence than the first one"], return_tensors="pt", padding=True)
    with pytest.raises(ValueError, match="padding masks"):
        with torch.no_grad(), capture_attention(model):
            model(**enc)


def test_stdlib_texts_are_deterministic_real_text():
    a, b = stdlib_texts(5, min_chars=300, seed=1), stdlib_texts(5, min_chars=300, seed=1)
    assert a == b and all(len(t) >= 300 for t in a)
    assert stdlib_texts(5, min_chars=300, seed=2) != a
    with pytest.raises(ValueError, match="only"):
        stdlib_texts(10**6)
    every = stdlib_texts(None, min_chars=300, seed=1)
    assert every[:5] == a and len(every) == len(set(every)) > 100
    with pytest.raises(ValueError, match="only"):
        stdlib_texts(len(every) + 1, min_chars=300, seed=1)
    assert len(stdlib_texts(len(every), min_chars=300, seed=1)) == len(every)


def test_nothing_in_the_repository_root_shadows_hugging_face_kernels():
    """``kernels`` is Hugging Face's package (transformers imports it); a Python started in the repository
    root, as a notebook kernel or ``python -m pytest`` is, must not find a ``kernels`` of ours first."""
    import subprocess
    import sys

    from companion.core import repo_path

    probe = "import importlib.util as u; s = u.find_spec('kernels'); print(s.origin if s else '')"
    origin = subprocess.run([sys.executable, "-c", probe], cwd=repo_path(), capture_output=True, text=True,
                            check=True).stdout.strip()
    assert not origin.startswith(str(repo_path())) or "site-packages" in origin, origin
    import companion_kernels

    assert companion_kernels.__name__ == "companion_kernels"


def test_tiny_causal_lm_cache_twin_and_qwen_names():
    """The shared plain decoder: a cached continuation equals the full forward, ``config`` builds a twin with the
    same state-dict names (Qwen's ``layers.<i>.mlp.up_proj`` among them), a bad size names its parameter."""
    from companion.core import ParameterError
    from companion.models import TinyCausalLM

    torch.manual_seed(0)
    model = TinyCausalLM(11, d=16, layers=2, heads=2, max_len=12).eval()
    ids = torch.randint(0, 11, (3, 9))
    with torch.no_grad():
        full = model(ids)
        _, cache = model(ids[:, :6], return_cache=True)
        step, _ = model(ids[:, 6:7], cache=cache, start=6, return_cache=True)
    torch.testing.assert_close(step[:, -1], full[:, 6], rtol=1e-5, atol=1e-6)
    assert full.shape == (3, 9, 11) and "layers.1.mlp.up_proj.weight" in model.state_dict()
    twin = TinyCausalLM(**model.config)
    assert list(twin.state_dict()) == list(model.state_dict())
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ParameterError, match="heads"):
        TinyCausalLM(11, d=16, heads=3)


def test_tiny_vit_shapes_and_attention_subclass():
    """The shared pre-LN ViT: CLS feature and tokens' shapes; a SelfAttention subclass changes the projection."""
    from companion.core import ParameterError
    from companion.models.tiny import SelfAttention, TinyViT

    class Frozen(SelfAttention):
        def effective_weight(self):
            return torch.zeros_like(self.in_proj_weight)

    x = torch.randn(2, 3, 8, 8)
    vit = TinyViT((3, 8, 8), patch=4, dim=16, depth=2, heads=2)
    assert vit(x).shape == (2, 16) and vit.tokens(x).shape == (2, 1 + 4, 16)
    torch.manual_seed(0)
    a = TinyViT((3, 8, 8), patch=4, dim=16, depth=1, heads=2)
    torch.manual_seed(0)
    b = TinyViT((3, 8, 8), patch=4, dim=16, depth=1, heads=2, attention=Frozen)
    assert list(a.state_dict()) == list(b.state_dict()) and not torch.allclose(a(x), b(x))
    with pytest.raises(ParameterError, match="patch"):
        TinyViT((3, 8, 8), patch=3)
