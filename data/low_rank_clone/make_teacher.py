"""Train the tiny byte-level LLaMA teacher of paper 11's causal experiment and save it here.

    .venv/bin/python data/low_rank_clone/make_teacher.py [--steps 1500]

A ``companion.models.tiny_llama`` (vocabulary 256 bytes, d = 128, 4 layers, 4 heads of 32, SwiGLU FFN
256, RoPE, RMSNorm) trained with AdamW on bytes of Python standard-library docstrings (the training split
of ``companion.low_rank_clone.experiments.byte_data``), then saved in float16 as ``model.safetensors``
with ``config.json`` (the transformers config, the command, the final validation loss).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from companion.core.atomic import write_json_atomic  # noqa: E402
from companion.low_rank_clone.experiments import byte_batch, byte_data, causal_val_loss  # noqa: E402
from companion.low_rank_clone.clone import lm_loss  # noqa: E402
from companion.models import tiny_llama  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=128, num_layers=4, num_heads=4, intermediate_size=256, max_position=512)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    data = byte_data(seq_len=args.seq_len, seed=0)
    model = tiny_llama(**CONFIG, seed=args.seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    for step in range(args.steps):
        ids = byte_batch(data["train"], args.batch, args.seq_len, gen)
        loss = lm_loss(model(input_ids=ids).logits, ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
    val = causal_val_loss(model, data["val"], seq_len=args.seq_len)
    print(f"validation loss {val:.4f} nats/byte")
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(state, str(tmp))
    tmp.replace(out / "model.safetensors")
    cfg = model.config.to_dict()
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta", "hidden_act",
            "tie_word_embeddings", "attention_bias", "mlp_bias", "rope_parameters")
    write_json_atomic(out / "config.json", {
        "config": {k: cfg[k] for k in keep if k in cfg},
        "command": "python data/low_rank_clone/make_teacher.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "lr": args.lr, "seed": args.seed,
        "val_loss_fp32": round(val, 4), "train_seconds": round(time.time() - t0, 1),
    })


if __name__ == "__main__":
    main()
