"""The outer level of the co-design search: the cluster's design knobs, priced by the MILP.

    outer  a point = (platform, NIC and NICs per GPU, switch and port mode, topology family and
           oversubscription, GPU count); the counts are those on the platform's HB-domain grid within
           the study's range (or its listed levels) that admit at least one valid strategy
    middle the MILP prices each point: the cheapest network that realizes exactly those knobs under
           every budget and hook, or the reason none exists; solved once per point (`Pricer` caches)
    inner  the design's strategies, searched exhaustively (or by Optuna past `auto_max_exhaustive`);
           designs whose performance system is identical (e.g. two switch models of the same speeds)
           share one inner search (`InnerCache`)

This module holds the space, the pricer, the caches and the exhaustive outer loop; the Optuna outer
loop lives in designer.search.runner (the only module that calls Optuna). No randomness here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from designer.errors import InfeasibleDesign, SolverError, SpecError
from designer.search.exhaustive import Candidate, Problem, ScoredTable
from designer.search.space import DesignSpace, explain_space


@dataclass(frozen=True, order=True)
class Fabric:
    """The knobs of one cluster design except its GPU count."""

    platform: str
    nic: str
    nics_per_gpu: float  # below 1: a NIC shared by 1 / nics_per_gpu GPUs
    switch: str
    radix: int  # 0: the MILP picks among the switch's port modes
    family: str
    oversubscription: float  # 0: the family's own (1 for the non-oversubscribed families)
    oversubscribed_level: int = 0  # the thinned tier boundary; 0: the study's (or the top one)
    # spare HB domains: -1 as the network section says; 0 none; 1 the network section's `spares`
    # (or its defaults): the knob `reliability.try_spares` adds, so spares trade capex against goodput
    spares: int = -1

    @property
    def spares_label(self) -> str:
        return {0: "no spares", 1: "spares"}.get(self.spares, "")

    @property
    def family_label(self) -> str:
        if not self.oversubscription:
            return self.family
        return f"{self.family}:{self.oversubscription:g}" + (f"@{self.oversubscribed_level}" if self.oversubscribed_level else "")

    @property
    def label(self) -> str:
        sw = f"{self.switch}/{self.radix}" if self.radix else self.switch
        sp = f" {self.spares_label}" if self.spares_label else ""
        return f"{self.platform} {self.nic}x{self.nics_per_gpu:g} {sw} {self.family_label}{sp}"


@dataclass(frozen=True, order=True)
class Knobs:
    """One point of the outer space: a fabric and a GPU count."""

    fabric: Fabric
    n_gpus: int

    @property
    def label(self) -> str:
        return f"{self.n_gpus} x {self.fabric.label}"

    def key(self) -> tuple:
        return (*dataclasses.astuple(self.fabric), self.n_gpus)

    @staticmethod
    def from_key(key: Sequence) -> "Knobs":
        """The inverse of `key` (a stored trial's record)."""
        npg = float(key[2])
        spares = int(key[8]) if len(key) == 10 else -1  # records written before the spares knob have 9 fields
        f = Fabric(str(key[0]), str(key[1]), int(npg) if npg >= 1 else npg, str(key[3]), int(key[4]), str(key[5]),
                   float(key[6]), int(key[7]), spares)
        return Knobs(f, int(key[-1]))


@dataclass(frozen=True)
class DroppedCount:
    """A GPU count the outer space leaves out, and the arithmetic that rules it out."""

    platform: str
    n_gpus: int
    reason: str


def factorization(n: int) -> str:
    """7848 -> '2³·3²·109' (the form an error message quotes)."""
    sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
    parts, m, p = [], n, 2
    while p * p <= m:
        k = 0
        while m % p == 0:
            m //= p
            k += 1
        if k:
            parts.append(f"{p}{str(k).translate(sup) if k > 1 else ''}")
        p += 1
    if m > 1:
        parts.append(str(m))
    return "·".join(parts) or "1"


def count_reason(problem: Problem, n_gpus: int, hb_domain_size: int) -> str | None:
    """Why `n_gpus` has no valid strategy on a platform of HB domain `hb_domain_size`, naming the
    arithmetic; None when it has one."""
    if n_gpus % hb_domain_size:
        return f"{n_gpus:,} is not a multiple of the HB domain size {hb_domain_size}"
    ds = DesignSpace.build(problem.llm, problem.training, problem.space, n_gpus=n_gpus, hb_domain_size=hb_domain_size)
    if not len(ds.layouts):
        # the values the model's rules remove from the study's lists, each with its rule (tp 3: does not
        # divide the 64 attention heads), so the user widens the right list
        removed = [f"{r.dim} {r.value} {r.rule}" for r in explain_space(problem.llm, problem.training, problem.space,
                                                                         hb_domain_size=hb_domain_size)
                   if r.dim in ("tp", "pp", "cp")]
        why = f"; removed: {', '.join(removed)}" if removed else ""
        return (f"{n_gpus:,} = {factorization(n_gpus)}: no tp·pp·cp of the strategy space divides it "
                f"(tp | {hb_domain_size}, heads {problem.llm.heads}; pp <= {problem.space.max_pp}, layers {problem.llm.layers}){why}")
    for i in range(len(ds.layouts)):
        if ds.free_mask(i).any():
            return None
    lo, hi = problem.training.batch_range
    batch = f"{lo:,}" if lo == hi else f"{lo:,}..{hi:,}"
    smallest_mbs = min(problem.space.microbatch_sizes)
    if smallest_mbs > hi:
        return (f"strategy_space.microbatch_sizes {list(problem.space.microbatch_sizes)}: every microbatch exceeds "
                f"the global batch {batch}; allowed: microbatches <= {hi:,}")
    return (f"{n_gpus:,} = {factorization(n_gpus)}: no tp·pp·dp·cp split with dp x microbatch (microbatch_sizes "
            f"{list(problem.space.microbatch_sizes)}) dividing the batch {batch}")


# the most GPU counts one platform's range may hold in a co-design search (each is checked for a strategy)
MAX_GPU_COUNTS = 100_000


def gpu_counts(problem: Problem, platform: str, hb_domain_size: int,
               candidates: Sequence[int]) -> tuple[list[int], list[DroppedCount]]:
    """The counts among `candidates` that admit a valid strategy, and those dropped with their reasons."""
    keep: list[int] = []
    dropped: list[DroppedCount] = []
    for n in candidates:
        why = count_reason(problem, int(n), hb_domain_size)
        if why is None:
            keep.append(int(n))
        else:
            dropped.append(DroppedCount(platform, int(n), why))
    return keep, dropped


@dataclass(frozen=True)
class OuterSpace:
    """Every fabric, with the GPU counts each platform admits. Points are enumerated fabric-major in
    a fixed order, so the exhaustive loop and any index over the space are deterministic."""

    fabrics: tuple[Fabric, ...]
    counts: dict[str, tuple[int, ...]]  # per platform
    dropped: tuple[DroppedCount, ...] = ()

    @property
    def size(self) -> int:
        return sum(len(self.counts.get(f.platform, ())) for f in self.fabrics)

    def points(self) -> Iterator[Knobs]:
        for f in self.fabrics:
            for n in self.counts.get(f.platform, ()):
                yield Knobs(f, n)

    def dims(self) -> dict[str, tuple[str, ...]]:
        """The categorical dimensions a sampler picks (the GPU count is an index per platform)."""
        out: dict[str, tuple[str, ...]] = {}
        out["platform"] = tuple(dict.fromkeys(f.platform for f in self.fabrics))
        out["nic"] = tuple(dict.fromkeys(f"{f.nic}x{f.nics_per_gpu:g}" for f in self.fabrics))
        out["switch"] = tuple(dict.fromkeys(f"{f.switch}/{f.radix}" if f.radix else f.switch for f in self.fabrics))
        out["family"] = tuple(dict.fromkeys(f.family_label for f in self.fabrics))
        spares = tuple(dict.fromkeys(f.spares_label for f in self.fabrics))
        if len(spares) > 1:
            out["spares"] = spares
        return out

    def from_params(self, params: dict[str, Any]) -> Knobs | None:
        """The point a sampler's picks name, None where that combination is not a fabric of the space."""
        for f in self.fabrics:
            if (f.platform == params["platform"] and f"{f.nic}x{f.nics_per_gpu:g}" == params["nic"]
                    and (f"{f.switch}/{f.radix}" if f.radix else f.switch) == params["switch"]
                    and f.family_label == params["family"]
                    and ("spares" not in params or f.spares_label == params["spares"])):
                counts = self.counts.get(f.platform, ())
                i = int(params[f"gpus_index@{f.platform}"])
                return Knobs(f, counts[min(max(i, 0), len(counts) - 1)]) if counts else None
        return None


def build_outer_space(spec: Any, catalog: Any, problem: Problem) -> OuterSpace:
    """The outer space of a co-design study (its `network` section: choices are the knob values, the
    GPU range or frontier levels the counts)."""
    net = spec.network
    ch = net.choices
    rel = getattr(spec, "reliability", None)
    try_spares = rel.try_spares if rel is not None else None
    spare_knob = (-1,) if not try_spares else tuple(int(b) for b in try_spares)
    fabrics: list[Fabric] = []
    for plat in ch.platforms:
        max_nics = catalog.platform(plat).max_nics_per_gpu
        min_nics = catalog.platform(plat).min_nics_per_gpu
        for nic in ch.nics:
            for k in nic.nics_per_gpu:
                if k > max_nics or k < min_nics:
                    continue
                for sw in ch.switches:
                    for radix in (sw.radix or (0,)):
                        for fam in ch.families:
                            ratios = ch.oversubscription if fam == "oversubscribed" else (0.0,)
                            levels = (ch.oversubscribed_levels or (0,)) if fam == "oversubscribed" else (0,)
                            for r in ratios:
                                for lvl in levels:
                                    for sp in spare_knob:
                                        fabrics.append(Fabric(plat, nic.id, int(k) if k >= 1 else float(k), sw.id,
                                                              int(radix), fam, float(r), int(lvl), sp))
    counts: dict[str, tuple[int, ...]] = {}
    dropped: list[DroppedCount] = []
    g = net.gpus
    fr = net.objective.frontier
    for plat in ch.platforms:
        hb = catalog.platform(plat).hb_domain_size
        if fr is not None and fr.vary == "n_gpus":
            cand = sorted({int(x) for x in fr.levels})
        elif g.count is not None:
            cand = [g.count]
        else:
            step = math.lcm(hb, g.multiple_of or 1)
            first = -(-g.lo // step) * step
            n_counts = max(0, (g.hi - first) // step + 1)
            if n_counts > MAX_GPU_COUNTS:
                # each count is checked for a valid strategy (about 0.4 ms each): a range this wide
                # would run for hours before the search starts
                raise SpecError(
                    f"field 'network.gpus' = [{g.lo:,}, {g.hi:,}]: in steps of {step:,} (platform {plat}'s HB domain"
                    + (f" and gpus.multiple_of {g.multiple_of:,}" if g.multiple_of else "")
                    + f") it holds {n_counts:,} GPU counts; a co-design search takes at most {MAX_GPU_COUNTS:,}: "
                    f"narrow the range or give a gpus.multiple_of of at least {math.ceil((g.hi - first + 1) / MAX_GPU_COUNTS):,} "
                    "(a multiple of every chosen HB domain size)")
            cand = list(range(first, g.hi + 1, step))
        keep, drop = gpu_counts(problem, plat, hb, cand)
        counts[plat] = tuple(keep)
        dropped += drop
    return OuterSpace(tuple(fabrics), counts, tuple(dropped))


# ---- the middle level: the MILP per point, cached ---------------------------------------------

@dataclass(frozen=True)
class Priced:
    """The MILP's answer for one point: a candidate design, or the reason there is none."""

    knobs: Knobs
    candidate: Candidate | None
    reason: str = ""
    milp_status: str = ""
    milp_gap: float | None = None
    milp_solve_time_s: float = 0.0


def design_id_for(design: Any, prefix: str) -> str:
    body = design.model_dump(mode="json", exclude={"level"})
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return f"{prefix}-{design.n_gpus}g-{digest}"


class Pricer:
    """Solves the network MILP for a point at most once (the cache is keyed by the knob tuple)."""

    def __init__(self, network: Any, catalog: Any, economics: Callable[[Any, Any], Any] | None = None) -> None:
        self.network, self.catalog = network, catalog
        self.economics = economics  # (design, catalog) -> DesignEconomics, the study's cost lines and reliability
        self.cache: dict[tuple, Priced] = {}
        self.solves = 0
        self.hits = 0

    def study_for(self, k: Knobs) -> Any:
        f = k.fabric
        ch = self.network.choices.model_dump()
        ch.update(platforms=[f.platform], nics=[{"id": f.nic, "nics_per_gpu": [f.nics_per_gpu]}],
                  switches=[{"id": f.switch, "radix": [f.radix] if f.radix else []}], families=[f.family])
        if f.oversubscription:
            ch["oversubscription"] = [f.oversubscription]
        if f.oversubscribed_level:
            ch["oversubscribed_level"] = f.oversubscribed_level
        ch["oversubscribed_levels"] = []
        gpus = {**self.network.gpus.model_dump(), "count": k.n_gpus, "min": None, "max": None, "multiple_of": None}
        extra: dict[str, Any] = {}
        if f.spares == 0:
            extra["spares"] = None
        elif f.spares == 1:
            from designer.spec.network_study import SparesSpec

            extra["spares"] = (self.network.spares or SparesSpec()).model_dump()
        return self.network.with_updates(choices=ch, gpus=gpus, objective={"kind": "min_cost",
                                                                          "precision": self.network.objective.precision},
                                         **extra)

    def price(self, k: Knobs) -> Priced:
        key = k.key()
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        from designer.network.api import solve_network
        from designer.network.design import design_to_system

        self.solves += 1
        try:
            result = solve_network(self.study_for(k), catalog=self.catalog)
        except (InfeasibleDesign, SolverError, SpecError) as err:
            # SpecError: the combination cannot be built at all (e.g. a NIC speed no port mode of the
            # switch offers); the study's own fields were checked against the catalog up front
            out = Priced(k, None, reason=str(err).splitlines()[0].removeprefix("field 'choices': "))
        else:
            d = result.designs[0]
            prefix = f"{d.family.value}-{d.platform}"
            cand = Candidate(design_id_for(d, prefix), d, design_to_system(d, self.catalog), float(d.capex_usd),
                             float(d.power_w), "codesign",
                             economics=self.economics(d, self.catalog) if self.economics is not None else None)
            out = Priced(k, cand, milp_status=result.status, milp_gap=result.gap, milp_solve_time_s=result.solve_time_s)
        self.cache[key] = out
        return out


# ---- the inner level, cached by the performance system -----------------------------------------

class InnerCache:
    """A design's inner search result, shared by designs whose performance system is the same."""

    def __init__(self, search: Callable[[Candidate], ScoredTable]) -> None:
        self.search = search
        self.cache: dict[str, ScoredTable] = {}
        self.runs = 0
        self.hits = 0

    @staticmethod
    def system_key(c: Candidate) -> str:
        return hashlib.sha256(c.system.model_dump_json().encode()).hexdigest()

    def table(self, c: Candidate) -> ScoredTable:
        key = self.system_key(c)
        t = self.cache.get(key)
        if t is None:
            self.runs += 1
            t = self.search(c)
            self.cache[key] = t
        else:
            self.hits += 1
        return t if t.design_id == c.design_id else dataclasses.replace(t, design_id=c.design_id)


# ---- one evaluated point -----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """An evaluated outer point: its price, its inner search, and why it has no result if it has none."""

    knobs: Knobs
    priced: Priced
    table: ScoredTable | None = None
    trial_number: int = -1

    @property
    def candidate(self) -> Candidate | None:
        return self.priced.candidate

    @property
    def best_time_to_train_s(self) -> float:
        t = self.table
        if t is None or t.best is None:
            return math.inf
        return float(t.time_to_train_s[t.best])

    @property
    def reason(self) -> str:
        if self.priced.candidate is None:
            return self.priced.reason
        if self.table is None or self.table.best is None:
            return "no feasible strategy" + (f": {self.table.why_none_feasible()}" if self.table is not None and len(self.table) else "")
        return ""


class Evaluator:
    """Price a point, then search its strategies: the function both outer loops call."""

    def __init__(self, problem: Problem, pricer: Pricer, inner: InnerCache) -> None:
        self.problem, self.pricer, self.inner = problem, pricer, inner

    def __call__(self, k: Knobs, trial_number: int = -1) -> Outcome:
        p = self.pricer.price(k)
        if p.candidate is None:
            return Outcome(k, p, None, trial_number)
        return Outcome(k, p, self.inner.table(p.candidate), trial_number)


def run_outer_exhaustive(space: OuterSpace, evaluate: Evaluator,
                         progress: Callable[[int, int, Outcome], None] | None = None) -> list[Outcome]:
    """Every point of the outer space, in its fixed order."""
    out = []
    total = space.size
    for i, k in enumerate(space.points()):
        o = evaluate(k)
        out.append(o)
        if progress is not None:
            progress(i + 1, total, o)
    return out


__all__ = ["DroppedCount", "Evaluator", "Fabric", "InnerCache", "Knobs", "Outcome", "OuterSpace", "Priced", "Pricer",
           "build_outer_space", "count_reason", "design_id_for", "factorization", "gpu_counts",
           "run_outer_exhaustive"]
