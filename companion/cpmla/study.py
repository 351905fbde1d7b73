"""The stage bodies of paper 14's GPU study (:mod:`companion.cpmla.scale`): CPMLA on upsampled digits, each
``fn(ctx) -> dict``. No plotly import.

``train`` trains CPMLA (Alg. 2: mirror Langevin on the EBM through one CP-Flow block, the flow fitted by Alg. 1)
and CP-Flow alone, and hands both, the data and the feature extractor to the later stages through ``ctx.shared``;
the later stages sample from those models, so they need ``train`` in the same call. Quality is KID and MMD on a
fixed random-feature extractor (:class:`~companion.cpmla.metrics.RandomFeatures`: no Inception weights here).
"""

from __future__ import annotations

import torch

from companion.core import Timer, check_choice, check_int
from companion.cpmla.cooperative import CoopConfig, cooperative_train
from companion.cpmla.metrics import RandomFeatures, kid, mmd_rbf
from companion.cpmla.mirror_map import HESSIANS
from companion.cpmla.samplers import mirror_langevin, ula
from companion.cpmla.targets import upsampled_digits


def _sync(device) -> bool:
    return torch.device(device).type == "cuda"


def train(ctx) -> dict:
    """CPMLA and CP-Flow alone trained for ``epochs`` on scikit-learn's digits upsampled to ``size`` × ``size``
    (d = size², scaled to [-1, 1]): T = ``T`` mirror steps of size ``eta`` per update with the ``hessian`` of ∇²G
    and the ``inverse`` of ∇G* (at most ``inverse_max_iter`` iterations, tolerance ``inverse_tol``); training
    seconds, parameter counts and the inverse's largest residual over the last five updates."""
    P = ctx.profile
    sync = _sync(ctx.device)
    data = torch.from_numpy(upsampled_digits(P["size"])).to(ctx.device)
    coop = CoopConfig(epochs=P["epochs"], batch=P["batch"], T=P["T"], eta=P["eta"], hessian=P["hessian"],
                      inverse=P["inverse"], inverse_tol=P["inverse_tol"], inverse_max_iter=P["inverse_max_iter"],
                      inverse_raise=False, flow_hidden=P["flow_hidden"], ebm_hidden=P["ebm_hidden"],
                      lr_flow=P["lr_flow"], lr_ebm=P["lr_ebm"], eval_epochs=(P["epochs"],), n_eval=P["n_eval"],
                      energy_reg=P["energy_reg"], seed=ctx.seed)
    with Timer(cuda_sync=sync) as t_cp:
        cp = cooperative_train(data, coop, method="cpmla")
    ctx.log(f"CPMLA trained in {t_cp.seconds:.1f} s")
    with Timer(cuda_sync=sync) as t_alone:
        alone = cooperative_train(data, coop, method="cpflow")
    ctx.log(f"CP-Flow alone trained in {t_alone.seconds:.1f} s")
    features = RandomFeatures(data.shape[1], seed=ctx.seed).to(ctx.device)
    ctx.shared["cpmla"] = {"data": data, "features": features, "cpmla": cp, "cpflow": alone}
    return {"n_data": len(data), "dim": data.shape[1], "train_seconds_cpmla": round(t_cp.seconds, 2),
            "train_seconds_cpflow": round(t_alone.seconds, 2), "flow_parameters": cp.flow.n_parameters(),
            "ebm_parameters": sum(p.numel() for p in cp.ebm.parameters()),
            "final_max_residual": float(max(cp.history["max_residual"][-5:]))}


def _trained(ctx) -> dict:
    if "cpmla" not in ctx.shared:
        raise RuntimeError("this stage samples the models the train stage trains in the same call: run it with "
                           "train (python -m companion.bench cpmla --stages train,...)")
    return ctx.shared["cpmla"]


def _quality(samples, data, features) -> dict:
    fs, fd = features(samples.float()), features(data.float())
    return {"kid": kid(fs, fd), "mmd_rbf": mmd_rbf(fs, fd),
            "pixel_mean_abs_error": float((samples.float().mean(0) - data.float().mean(0)).abs().mean())}


def quality(ctx) -> dict:
    """KID, MMD (RBF) and mean pixel error against the data of ``n_eval`` samples of CPMLA (the training loop's
    final mirror chains), CP-Flow alone and the EBM sampled by ULA (T steps of 2η from N(0, I)), beside two
    halves of the data (the metric's floor)."""
    P, m = ctx.profile, _trained(ctx)
    data, features, ebm = m["data"], m["features"], m["cpmla"].ebm
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed + 1)
    y0 = torch.randn(P["n_eval"], data.shape[1], generator=gen, device=ctx.device, dtype=data.dtype)
    out = {"cpmla": _quality(m["cpmla"].samples[P["epochs"]], data, features),
           "cpflow": _quality(m["cpflow"].samples[P["epochs"]], data, features),
           "ula": _quality(ula(ebm, y0, P["T"], 2 * P["eta"], generator=gen).x, data, features),
           "data_split_half": _quality(data[: len(data) // 2], data[len(data) // 2:], features)}
    ctx.log(f"quality: {out}")
    return out


def _timed_chain(ctx, T: int, hessian: str, cap: int, seed: int):
    """``n_eval`` CPMLA chains of T mirror steps from y_0 ~ N(0, I) (the trained EBM and flow): (chain, seconds).
    The first call of a process runs a short untimed chain first (kernel set-up)."""
    P, m = ctx.profile, _trained(ctx)
    data, flow, ebm = m["data"], m["cpmla"].flow, m["cpmla"].ebm
    gen = torch.Generator(device=ctx.device).manual_seed(seed)
    kw = dict(inverse=P["inverse"], inverse_tol=P["inverse_tol"], inverse_raise=False, generator=gen)
    if not m.get("warm"):
        y = torch.randn(P["n_eval"], data.shape[1], generator=gen, device=ctx.device, dtype=data.dtype)
        mirror_langevin(ebm, flow, y, 2, P["eta"], hessian=P["hessian"], inverse_max_iter=P["inverse_max_iter"], **kw)
        m["warm"] = True
    y = torch.randn(P["n_eval"], data.shape[1], generator=gen, device=ctx.device, dtype=data.dtype)
    with Timer(cuda_sync=_sync(ctx.device)) as t:
        chain = mirror_langevin(ebm, flow, y, T, P["eta"], hessian=hessian, inverse_max_iter=cap, **kw)
    return chain, t.seconds


def sampling_time(ctx) -> list[dict]:
    """Seconds per 1k CPMLA samples for each T of ``T_grid`` (the profile's Hessian and inverse cap), with the
    inverse's largest residual."""
    P, out = ctx.profile, []
    for T in P["T_grid"]:
        chain, sec = _timed_chain(ctx, check_int("T_grid", T, lo=1), P["hessian"], P["inverse_max_iter"], ctx.seed + 2)
        out.append({"T": T, "seconds_per_1k": sec * 1000 / P["n_eval"], "max_residual": chain.max_residual})
        ctx.log(f"T = {T}: {out[-1]['seconds_per_1k']:.3f} s per 1k samples")
    return out


def hessian_ablation(ctx) -> list[dict]:
    """The Hessian of ∇²G in the mirror step, each of ``hessians`` (full, exact diagonal, Hutchinson diagonal) at
    T = ``T``: seconds per 1k samples, the inverse's residual and the samples' quality."""
    P, m, out = ctx.profile, _trained(ctx), []
    for hessian in P["hessians"]:
        chain, sec = _timed_chain(ctx, P["T"], check_choice("hessians", hessian, HESSIANS), P["inverse_max_iter"],
                                  ctx.seed + 3)
        out.append({"hessian": hessian, "seconds_per_1k": sec * 1000 / P["n_eval"], "max_residual": chain.max_residual,
                    **_quality(chain.x, m["data"], m["features"])})
        ctx.log(f"Hessian {hessian}: {out[-1]}")
    return out


def lbfgs_ablation(ctx) -> list[dict]:
    """The L-BFGS iteration cap of the inverse ∇G*, each of ``lbfgs_caps`` at T = ``T``: seconds per 1k samples,
    the inverse's residual and the samples' quality."""
    P, m, out = ctx.profile, _trained(ctx), []
    for cap in P["lbfgs_caps"]:
        chain, sec = _timed_chain(ctx, P["T"], P["hessian"], check_int("lbfgs_caps", cap, lo=1), ctx.seed + 4)
        out.append({"max_iter": cap, "seconds_per_1k": sec * 1000 / P["n_eval"], "max_residual": chain.max_residual,
                    **_quality(chain.x, m["data"], m["features"])})
        ctx.log(f"L-BFGS cap {cap}: {out[-1]}")
    return out
