"""The stage bodies of paper 14's GPU study (:mod:`companion.cpmla.scale`): CPMLA on upsampled digits, each
``fn(ctx) -> dict``. No plotly import.

One stage per seed (:func:`seed_run`): it trains CPMLA (Alg. 2: mirror Langevin on the EBM through one CP-Flow
block at temperature τ, the flow fitted by Alg. 1, the EBM by contrastive divergence with the energy regulariser
λ·E[f²]) and CP-Flow alone, then draws the three samplers from the same starting points:

- one dual draw y_0 ~ N(0, I) per seed, shared by every sampler;
- **CP-Flow alone**: x̂ = ∇G*_alone(y_0), its own flow's map of y_0;
- **CPMLA**: T mirror steps from y_0 in the dual, so its primal start is x_0 = ∇G*_ϑ(y_0), the co-trained flow's
  sample of the same y_0;
- **Langevin** (EBM + ULA, step δ = 2η, the same temperature τ): T steps on the same EBM from that same primal x_0, with the same
  standard-normal draws ε_k as the CPMLA chain (one generator seeded alike; with the diagonal Hessian the mirror
  chain draws nothing else), so the two chains differ only in the geometry of the step.

A seed sets the model initialisation, the data order and the sampling noise. Quality is the energy distance in pixel
space (:func:`~companion.cpmla.metrics.energy_distance`) and KID on a fixed random-feature extractor (one extractor
for every seed; no Inception weights here), each sample set against one half of the data, beside the noise floor:
the other half of the data, of the same size, against the same half. The later stages sample the first seed's models
of the same call.
"""

from __future__ import annotations

import time

import torch

from companion.core import Timer, check_choice, check_int
from companion.cpmla.cooperative import CoopConfig, cooperative_train
from companion.cpmla.metrics import RandomFeatures, energy_distance, kid
from companion.cpmla.mirror_map import HESSIANS
from companion.cpmla.samplers import mirror_langevin, ula
from companion.cpmla.targets import upsampled_digits

DTYPES = {"float32": torch.float32, "float64": torch.float64}
SAMPLERS = ("cpmla", "langevin", "cpflow")


def _sync(device) -> bool:
    return torch.device(device).type == "cuda"


def _data(ctx) -> dict:
    """The digits on the device in the profile's dtype and the fixed feature extractor (built once per call)."""
    if "cpmla_data" not in ctx.shared:
        P = ctx.profile
        dtype = DTYPES[check_choice("dtype", P["dtype"], tuple(DTYPES))]
        data = torch.from_numpy(upsampled_digits(P["size"])).to(device=ctx.device, dtype=dtype)
        ctx.shared["cpmla_data"] = {"data": data, "features": RandomFeatures(data.shape[1], seed=0).to(ctx.device)}
    return ctx.shared["cpmla_data"]


def scores(samples, ref, features) -> dict:
    """Energy distance (pixels) and KID (fixed random features) of ``samples`` against ``ref``, and the mean
    absolute pixel error of the sample mean (above 1 on the [-1, 1] scale the samples left the data range)."""
    return {"energy_distance": energy_distance(samples, ref),
            "kid": kid(features(samples.float()), features(ref.float())),
            "pixel_mean_abs_error": float((samples.double().mean(0) - ref.double().mean(0)).abs().mean())}


def residual_stats(residuals, tol) -> dict:
    """Median and largest per-sample inverse residual ‖∇G(x̂) − y‖ and the share of samples within ``tol``."""
    r = residuals.double()
    return {"median": float(r.median()), "max": float(r.max()), "share_converged": float((r <= tol).double().mean())}


def _config(P, seed) -> CoopConfig:
    return CoopConfig(epochs=P["epochs"], batch=P["batch"], T=P["T"], eta=P["eta"], temperature=P["temperature"],
                      hessian=P["hessian"],
                      inverse=P["inverse"], inverse_tol=P["inverse_tol"], inverse_max_iter=P["inverse_max_iter"],
                      inverse_raise=False, flow_hidden=P["flow_hidden"], ebm_hidden=P["ebm_hidden"],
                      lr_flow=P["lr_flow"], lr_ebm=P["lr_ebm"], eval_epochs=(), energy_reg=P["energy_reg"], seed=seed)


def _inverse_kw(P, cap=None) -> dict:
    return dict(inverse=P["inverse"], inverse_tol=P["inverse_tol"], inverse_raise=False,
                inverse_max_iter=P["inverse_max_iter"] if cap is None else cap)


def compare_samplers(ebm, flow, flow_alone, y0, P, seed) -> dict:
    """The three samplers from the common y_0 (module docstring): {name: samples}, the common primal start x_0 and
    the final inverse residuals of the CPMLA chain and of CP-Flow alone."""
    inv = dict(method=P["inverse"], tol=P["inverse_tol"], max_iter=P["inverse_max_iter"], raise_on_fail=False)
    with torch.no_grad():
        start = flow.inverse(y0, x0=y0, **inv)
        alone = flow_alone.inverse(y0, x0=y0, **inv)
    dev = y0.device
    chain = mirror_langevin(ebm, flow, y0, P["T"], P["eta"], hessian=P["hessian"], temperature=P["temperature"],
                            generator=torch.Generator(device=dev).manual_seed(seed), **_inverse_kw(P))
    langevin = ula(ebm, start.x, P["T"], 2 * P["eta"], temperature=P["temperature"],
                   generator=torch.Generator(device=dev).manual_seed(seed))
    return {"samples": {"cpmla": chain.x, "langevin": langevin.x, "cpflow": alone.x}, "start": start.x,
            "residuals": {"cpmla": chain.residuals, "cpflow": alone.residuals}}


def seed_run(ctx, index: int) -> dict:
    """Seed ``seed + index``: CPMLA (regularised EBM) and CP-Flow alone trained for ``epochs``; f_θ on data and on
    the mirror samples per epoch; energy distance and KID of CPMLA, Langevin and CP-Flow alone from the same starts
    against one half of the data, with the noise floor (the other half) and the common start's own scores; the
    inverse's final residuals (median, max, share within ``inverse_tol``)."""
    P, t0 = ctx.profile, time.perf_counter()
    seed = ctx.seed + index
    d = _data(ctx)
    data, features = d["data"], d["features"]
    sync = _sync(ctx.device)
    with Timer(cuda_sync=sync) as t_cp:
        cp = cooperative_train(data, _config(P, seed), method="cpmla")
    with Timer(cuda_sync=sync) as t_alone:
        alone = cooperative_train(data, _config(P, seed), method="cpflow")
    ctx.log(f"seed {seed}: CPMLA trained in {t_cp.seconds:.1f} s, CP-Flow alone in {t_alone.seconds:.1f} s")
    gen = torch.Generator(device=ctx.device).manual_seed(10_000 + seed)
    half = len(data) // 2
    perm = torch.randperm(len(data), generator=gen, device=ctx.device)
    held, ref = data[perm[:half]], data[perm[half:2 * half]]
    n = min(check_int("n_eval", P["n_eval"], lo=4), half)
    y0 = torch.randn(n, data.shape[1], generator=gen, device=ctx.device, dtype=data.dtype)
    out = compare_samplers(cp.ebm, cp.flow, alone.flow, y0, P, 20_000 + seed)
    if index == 0 or "cpmla" not in ctx.shared:
        ctx.shared["cpmla"] = {"ebm": cp.ebm, "flow": cp.flow, "held": held, "ref": ref, "seed": seed}
    last = cp.history["max_residual"][-cp.iterations_per_epoch:]
    result = {"seed": seed, "n_samples": n, "n_data": len(data), "dim": data.shape[1],
              **{k: scores(v, ref, features) for k, v in out["samples"].items()},
              "start": scores(out["start"], ref, features), "floor": scores(held[:n], ref, features),
              "inverse": {k: residual_stats(v, P["inverse_tol"]) for k, v in out["residuals"].items()},
              "train_last_epoch_max_residual": float(max(last)),
              "f_data": cp.history["f_data"], "f_samples": cp.history["f_samples"],
              "train_seconds_cpmla": round(t_cp.seconds, 2), "train_seconds_cpflow": round(t_alone.seconds, 2),
              "flow_parameters": cp.flow.n_parameters(), "ebm_parameters": sum(p.numel() for p in cp.ebm.parameters()),
              "seconds": round(time.perf_counter() - t0, 2)}
    ctx.log(f"seed {seed}: energy distance " + ", ".join(f"{k} {result[k]['energy_distance']:.4g}"
                                                         for k in (*SAMPLERS, "floor")))
    return result


def _trained(ctx) -> dict:
    if "cpmla" not in ctx.shared:
        raise RuntimeError("this stage samples the models a seed stage trains in the same call: run it with one "
                           "(python -m companion.bench cpmla --stages seed_0,...)")
    return ctx.shared["cpmla"]


def _timed_chain(ctx, T: int, hessian: str, cap: int, seed: int, n: int):
    """``n`` CPMLA chains of T mirror steps from y_0 ~ N(0, I) (the first seed's EBM and flow): (chain, seconds).
    The first call of a process runs a short untimed chain first (kernel set-up)."""
    P, m = ctx.profile, _trained(ctx)
    flow, ebm, dim, dtype = m["flow"], m["ebm"], m["ref"].shape[1], m["ref"].dtype
    gen = torch.Generator(device=ctx.device).manual_seed(seed)
    if not m.get("warm"):
        y = torch.randn(n, dim, generator=gen, device=ctx.device, dtype=dtype)
        mirror_langevin(ebm, flow, y, 2, P["eta"], hessian=P["hessian"], temperature=P["temperature"], generator=gen,
                        **_inverse_kw(P))
        m["warm"] = True
    y = torch.randn(n, dim, generator=gen, device=ctx.device, dtype=dtype)
    with Timer(cuda_sync=_sync(ctx.device)) as t:
        chain = mirror_langevin(ebm, flow, y, T, P["eta"], hessian=hessian, temperature=P["temperature"], generator=gen,
                                **_inverse_kw(P, cap))
    return chain, t.seconds


def sampling_time(ctx) -> list[dict]:
    """Seconds per 1k CPMLA samples for each T of ``T_grid`` (``n_eval`` chains, the profile's Hessian and inverse
    cap), with the inverse's final residuals."""
    P, out = ctx.profile, []
    for T in P["T_grid"]:
        chain, sec = _timed_chain(ctx, check_int("T_grid", T, lo=1), P["hessian"], P["inverse_max_iter"], ctx.seed + 2,
                                  P["n_eval"])
        out.append({"T": T, "seconds_per_1k": sec * 1000 / P["n_eval"],
                    "inverse": residual_stats(chain.residuals, P["inverse_tol"])})
        ctx.log(f"T = {T}: {out[-1]['seconds_per_1k']:.3f} s per 1k samples")
    return out


def _ablation(ctx, key, settings, hessian_of, cap_of, n) -> list[dict]:
    P, m, out = ctx.profile, _trained(ctx), []
    features = _data(ctx)["features"]
    for v in settings:
        chain, sec = _timed_chain(ctx, P["T"], hessian_of(v), cap_of(v), ctx.seed + 3, n)
        out.append({key: v, "seconds_per_1k": sec * 1000 / n, "inverse": residual_stats(chain.residuals, P["inverse_tol"]),
                    **scores(chain.x, m["ref"][:n], features)})
        ctx.log(f"{key} {v}: {out[-1]}")
    return out


def lbfgs_ablation(ctx) -> list[dict]:
    """The L-BFGS iteration cap of the inverse ∇G*, each of ``lbfgs_caps`` at T = ``T`` (``n_eval`` chains): seconds
    per 1k samples, the final residuals (median, max, share within ``inverse_tol``) and the samples' scores."""
    P = ctx.profile
    return _ablation(ctx, "max_iter", [check_int("lbfgs_caps", c, lo=1) for c in P["lbfgs_caps"]],
                     lambda c: P["hessian"], lambda c: c, P["n_eval"])


def hessian_ablation(ctx) -> list[dict]:
    """The Hessian of ∇²G in the mirror step, each of ``hessians`` (full, exact diagonal, Hutchinson diagonal) at
    T = ``T`` on ``n_ablation`` chains (the full Hessian's batched eigendecomposition costs O(d³) per chain and step,
    hence fewer chains than ``n_eval``): seconds per 1k samples, the inverse's residuals and the samples' scores."""
    P = ctx.profile
    return _ablation(ctx, "hessian", [check_choice("hessians", h, HESSIANS) for h in P["hessians"]],
                     lambda h: h, lambda h: P["inverse_max_iter"], check_int("n_ablation", P["n_ablation"], lo=4))
