"""Aging evolution over hybrid operator patterns (Sec. 4 of the paper's method: the evolutionary search).

The search space [secondary: no search code is released]: the model is three **stages** (early, middle,
late); each stage repeats ``reps`` times a unit made of its operator **mix** (one operator, or two in a 1:1
ratio, from DeltaNet ``"deltanet"``, attention ``"a"`` and Mamba2 ``"m2"``), each operator followed by ``ffn``
FFN layers. The genes are (mix, ffn, reps) per stage: 9 factors. The pattern the paper's search found,
alternating ``[DeltaNet-FFN-Mamba2-FFN]`` and ``[Attention-FFN-Mamba2-FFN]`` blocks, is mix
``("deltanet", "m2")`` / ``("a", "m2")`` with ``ffn = 1``.

**Aging evolution** (Real et al. 2019), as the paper uses it: a population of ``P`` architectures, each cycle
sample ``S`` of them, take the fittest (tournament), **mutate one factor** (a child differs from its parent in
exactly one gene, tested), add the child and remove the *oldest* member. Fitness: a short-training loss (the
paper: a short-training perplexity proxy with 88.8% Spearman correlation to full training [secondary]) under a
latency limit measured on the device: a child over the limit gets fitness ``inf`` (it can never win a
tournament). Fitness and latency are cached per genome.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, replace

from companion.core import ParameterError, check_int

MIXES = (("a",), ("deltanet",), ("m2",), ("deltanet", "m2"), ("a", "m2"), ("deltanet", "a"))
FFNS = (0, 1, 2)
REPS = (1, 2)
STAGE_NAMES = ("early", "middle", "late")
FACTORS = tuple((s, f) for s in range(3) for f in ("mix", "ffn", "reps"))


@dataclass(frozen=True)
class Stage:
    mix: tuple = ("deltanet",)
    ffn: int = 1
    reps: int = 1

    def __post_init__(self):
        if tuple(self.mix) not in MIXES:
            raise ParameterError("mix", self.mix, "one of " + ", ".join(map(str, MIXES)))
        if self.ffn not in FFNS:
            raise ParameterError("ffn", self.ffn, f"one of {FFNS}")
        if self.reps not in REPS:
            raise ParameterError("reps", self.reps, f"one of {REPS}")


@dataclass(frozen=True)
class Genome:
    stages: tuple = (Stage(), Stage(), Stage())

    def __post_init__(self):
        if len(self.stages) != 3 or not all(isinstance(s, Stage) for s in self.stages):
            raise ParameterError("stages", self.stages, "three Stage objects (early, middle, late)")

    def layer_types(self) -> tuple:
        out = []
        for s in self.stages:
            for _ in range(s.reps):
                for op in s.mix:
                    out += [op] + ["f"] * s.ffn
        return tuple(out)

    def genes(self) -> tuple:
        return tuple(getattr(self.stages[i], f) for i, f in FACTORS)

    def label(self) -> str:
        def one(s):
            return f"{s.reps}×[" + "-".join(f"{op}{'+f' * s.ffn}" for op in s.mix) + "]"
        return " | ".join(one(s) for s in self.stages)


NF_PATTERN = Genome((Stage(("deltanet", "m2"), 1, 2), Stage(("a", "m2"), 1, 1), Stage(("deltanet", "m2"), 1, 1)))


def differing_factors(a: Genome, b: Genome) -> list:
    return [FACTORS[i] for i, (x, y) in enumerate(zip(a.genes(), b.genes())) if x != y]


def random_genome(rng: random.Random) -> Genome:
    return Genome(tuple(Stage(rng.choice(MIXES), rng.choice(FFNS), rng.choice(REPS)) for _ in range(3)))


def mutate(g: Genome, rng: random.Random) -> Genome:
    """Change exactly one factor (stage, gene) to a different value."""
    i, field = rng.choice(FACTORS)
    choices = {"mix": MIXES, "ffn": FFNS, "reps": REPS}[field]
    old = getattr(g.stages[i], field)
    new = rng.choice([c for c in choices if c != old])
    stages = list(g.stages)
    stages[i] = replace(stages[i], **{field: new})
    return Genome(tuple(stages))


def aging_evolution(fitness, latency, *, population: int = 8, sample: int = 3, cycles: int = 10,
                    latency_limit: float = float("inf"), seed: int = 0, initial=None) -> dict:
    """Run aging evolution. ``fitness(genome) -> loss`` and ``latency(genome) -> ms`` are called once per new
    genome (cached). Returns the history (every evaluated member in order, with its parent and the mutated
    factor), the best feasible member and the per-cycle best."""
    check_int("population", population, lo=2)
    check_int("sample", sample, lo=1, hi=population)
    check_int("cycles", cycles, lo=0)
    rng = random.Random(seed)
    cache: dict = {}

    def evaluate(g):
        if g not in cache:
            lat = float(latency(g))
            fit = float(fitness(g)) if lat <= latency_limit else float("inf")
            cache[g] = (fit, lat)
        return cache[g]

    pop: deque = deque()
    history = []
    start = list(initial or [])
    while len(start) < population:
        start.append(random_genome(rng))
    for g in start[:population]:
        fit, lat = evaluate(g)
        member = {"genome": g, "fitness": fit, "latency_ms": lat, "cycle": 0, "parent": None, "factor": None}
        pop.append(member)
        history.append(member)
    best_per_cycle = [min(m["fitness"] for m in pop)]
    for c in range(1, cycles + 1):
        contenders = rng.sample(list(pop), sample)
        parent = min(contenders, key=lambda m: m["fitness"])
        child = mutate(parent["genome"], rng)
        fit, lat = evaluate(child)
        member = {"genome": child, "fitness": fit, "latency_ms": lat, "cycle": c, "parent": parent["genome"],
                  "factor": differing_factors(parent["genome"], child)[0]}
        pop.append(member)
        pop.popleft()  # the oldest dies
        history.append(member)
        best_per_cycle.append(min(m["fitness"] for m in history))
    feasible = [m for m in history if m["fitness"] != float("inf")]
    best = min(feasible, key=lambda m: m["fitness"]) if feasible else None
    return {"history": history, "best": best, "best_per_cycle": best_per_cycle, "population": list(pop),
            "n_evaluated": len(cache), "latency_limit": latency_limit}
