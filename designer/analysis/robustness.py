"""Price uncertainty: does a design stay on the capex / time-to-train front, or stay the goal's answer,
when the catalog's prices are off?

Capex is linear in the catalog's prices (designer.network.milp module docstring: D x platform price +
switches x switch price + transceivers x optic price + DACs x DAC price + NICs x NIC price), and time
to train does not depend on prices at all. So each design is one row of quantities over catalog
entry ids (`price_exposure`), a price draw is one row of prices, and the capex of every design under
every draw is one matrix product. The front of each draw is then a cumulative minimum along the
designs sorted once by time, and the goal's answer a masked argmin: no Python loop over draws.

Exposure
--------
`price_exposure(design, catalog)` writes design.capex_usd as sum_i q_i p_i + rest_usd over the ids
of its platform, switch, link media and NIC, with p_i the catalog's price_usd (per HB domain, per
switch, per module or cable, per NIC):

    q_platform = n_domains (spares included: they are built and paid for)
    q_switch   = switch_count            (the MILP spreads a switch's price over its R ports and buys
                                          switch_count * R ports: the same sum)
    q_medium   = modules of each link medium: the design's own list where it has one (one medium per
                 link layer, NetworkDesign.media_modules), else transceiver_count / ports_per_module
                 for the optic (a twin-port module serves two link ends) and dac_count /
                 ports_per_module for the DAC
    q_nic      = the NICs the design pays for: nic_count, less any its platform's price already
                 includes (a platform with `includes_nics`): the design's priced_nic_count where it
                 has one, else design.nic_capex_usd / NIC price, which must be a whole number of
                 NICs. With none to pay for there is no NIC term.
    rest_usd   = 0: every capex item of the cost model is a catalog price

A GPU's own catalog price is not a term: a platform's price includes its GPUs (and the NICs it says
it includes), so a range on a GPU id moves nothing; put it on the platform. The exposure is checked against design.capex_usd (1e-9 relative), so a design priced with
another catalog (other files, other `price_multipliers`) is refused: multipliers are already in the
catalog's price_usd, and price ranges must be given in the same, multiplied, dollars.

Draws
-----
Every price id with a range is drawn independently, all ids jointly in one draw: one matrix
U ~ U(0, 1) of ids x draws from numpy.random.default_rng(seed), rows in sorted id order (so the
draws do not depend on the order of the designs), mapped through each id's inverse CDF: uniform on
[low, high], or triangular (low, mode, high). A range's mode must be the catalog's point price the
designs were priced at (a range read before `price_multipliers` were applied is refused). Ids
without a range keep their point price (listed in RobustnessResult.fixed_price_ids).

Front and ties
--------------
The front of a draw is the non-dominated set of (capex, time), both minimized, with designer.pareto's
rule for duplicates: a design is on it iff no design is at most as dear and at most as slow and
strictly better in one, and no design before it in input order has the same capex and the same time.
With the designs sorted by time (stable, so input order breaks time ties), that is: the design has
the least capex of its time group, is the first of the group (input order) with that capex, and that
capex is strictly below the least capex of every strictly faster design (a cumulative minimum).

Goal
----
The study's Goal record (designer.spec.study.Goal): `minimize` one metric `subject_to` limits on
capex_usd, time_to_train_s/_days, power_w or energy_j/_mwh (GOAL_METRICS; other metrics are refused).
Only capex varies with prices; the other metrics are fixed per design (power and energy need `power_w`). The answer of a draw is exactly
designer.search.goal.answer_goal's on that draw's capex: among the designs that meet every limit
(the same relative excess <= 0 test), the least target, then the least capex, then the least time,
then the least design_id. A draw where no design meets the limits has no answer (p_goal_unmet).
The `front` goal has no single answer: p_optimum is None.

Candidate set
-------------
The caller passes the designs, and the probabilities are over that set only: a design left out can
neither be on a draw's front nor push another off it. Under other prices a design off the point-price
front can enter it, so the set should hold more than that front: every evaluated design except those
another design dominates at every price within the ranges (`candidate_mask`: the least capex
difference of two designs over the price box is a closed-form linear program, each price at its low
or high end by the sign of the quantity difference). Intuitively, that is the exact front plus the
designs within the price band of it. A design left out this way is dominated in every draw, so
leaving it out changes no probability; one kept may still never reach a front. In a study, the pool to
filter is every design the MILP priced and the perf model scored: the per-family and per-platform
cheapest networks of each GPU count (the goal's runners-up come from the same pool). The rule is
about capex and time only: for a goal that minimizes power or energy, or limits capex from below,
keep every design that can meet the goal's fixed limits.

Pure: no I/O, no globals; the seed is an argument.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field

from designer.errors import SpecError
from designer.search.goal import DesignPoint, goal_text
from designer.spec.base import Record, Result
from designer.spec.catalog import Catalog, PriceRange
from designer.spec.study import Goal, GoalLimit

if TYPE_CHECKING:  # annotations only: the analysis needs no solver
    from designer.network.design import NetworkDesign

Distribution = Literal["uniform", "triangular"]
QUANTILES = (0.05, 0.50, 0.95)  # reported as capex_p5_usd, capex_p50_usd, capex_p95_usd
REPRODUCE_RTOL = 1e-9  # exposure at point prices against design.capex_usd
# The goal metrics the analysis knows how prices move: capex (linear in them) and the ones prices
# leave fixed (designer.search.goal.DesignPoint.metric).
GOAL_METRICS = ("capex_usd", "time_to_train_s", "time_to_train_days", "power_w", "energy_j", "energy_mwh")


class PriceTerm(Record):
    """quantity x price_usd of one catalog entry in a design's capex."""

    entry_id: str
    section: Literal["platforms", "switches", "media", "nics"]
    quantity: float = Field(ge=0)
    price_usd: float = Field(ge=0)  # the catalog's point price (multipliers applied)


class PriceExposure(Record):
    """A design's capex as sum(term.quantity * price of term.entry_id) + rest_usd."""

    design_id: str
    label: str
    family: str
    platform: str
    n_gpus: int
    capex_usd: float  # the design's own figure, which the terms reproduce at point prices
    terms: tuple[PriceTerm, ...]
    rest_usd: float = 0.0

    def capex_at(self, prices_usd: Mapping[str, float]) -> float:
        """Capex with the given prices by entry id (ids not given keep their point price)."""
        return self.rest_usd + sum(t.quantity * prices_usd.get(t.entry_id, t.price_usd) for t in self.terms)


class DesignRobustness(Result):
    """One design over the draws."""

    design_id: str
    label: str
    time_to_train_s: float
    capex_point_usd: float  # at the catalog's point prices
    on_point_front: bool
    point_optimum: bool | None  # None for the front goal
    p_on_front: float
    p_optimum: float | None
    capex_mean_usd: float
    capex_p5_usd: float
    capex_p50_usd: float
    capex_p95_usd: float


class RobustnessResult(Result):
    samples: int
    seed: int
    goal: str  # designer.search.goal.goal_text
    price_ids: tuple[str, ...]  # drawn, in column order
    fixed_price_ids: tuple[str, ...]  # no range given: kept at the point price
    designs: tuple[DesignRobustness, ...]  # in input order
    p_same_front: float  # draws whose front is the point-price front exactly
    p_goal_unmet: float | None  # draws where no design meets the goal's limits; None for the front goal

    def design(self, design_id: str) -> DesignRobustness:
        for d in self.designs:
            if d.design_id == design_id:
                return d
        raise SpecError(f"design_id '{design_id}' is not in the result; allowed: "
                        + ", ".join(d.design_id for d in self.designs))


# ----------------------------------------------------------------------------------------------
# Exposure
# ----------------------------------------------------------------------------------------------


def _price(entry: Any, what: str) -> float:
    if entry.price_usd is None:
        raise SpecError(f"catalog {what} '{entry.id}' has no price_usd; add it in a catalog file")
    return float(entry.price_usd)


def _paid_nics(design: NetworkDesign, nic_usd: float) -> float:
    """NICs the design's capex pays for (module docstring): all of them unless its platform's price
    includes some, as design.nic_capex_usd says."""
    if nic_usd == 0:
        return float(design.bom.nic_count)
    paid = design.nic_capex_usd / nic_usd
    whole = round(paid)
    if abs(paid - whole) > REPRODUCE_RTOL * max(paid, 1.0) or not 0 <= whole <= design.bom.nic_count:
        raise SpecError(f"design '{design.label}': NIC capex ${design.nic_capex_usd:,.2f} is not a whole number of "
                        f"'{design.nic}' at this catalog's ${nic_usd:,.2f}; pass the catalog it was priced with "
                        "(same files and price_multipliers)")
    return float(whole)


def _media_terms(design: NetworkDesign, catalog: Catalog) -> list[tuple[str, str, float, float]]:
    """(id, section, modules, price per module) of the link media. A design that lists its modules
    (NetworkDesign.media_modules: one medium per link layer) is read as is; otherwise the NIC links
    are the DAC when `dac` is set, every other link end the optic."""
    listed = getattr(design, "media_modules", ())
    if listed:
        return [(mid, "media", float(n), _price(catalog.medium(mid), "medium")) for mid, n in listed]
    bom = design.bom
    optic = catalog.medium(design.optic)
    out = [(optic.id, "media", float(bom.transceiver_count) / optic.ports_per_module, _price(optic, "optic"))]
    if design.dac is not None:
        dac = catalog.medium(design.dac)
        out.append((dac.id, "media", float(bom.dac_count) / dac.ports_per_module, _price(dac, "DAC")))
    return out


def price_exposure(design: NetworkDesign, catalog: Catalog, design_id: str | None = None) -> PriceExposure:
    """design.capex_usd as quantities over catalog entry ids (module docstring). `catalog` must be the
    one the design was priced with (the study's, multipliers included): checked to 1e-9 relative."""
    plat, sw, nic = catalog.platform(design.platform), catalog.switch(design.switch), catalog.nic(design.nic)
    nic_usd = _price(nic, "nic")
    paid_nics = (float(design.priced_nic_count) if getattr(design, "media_modules", ()) and
                 hasattr(design, "priced_nic_count") else _paid_nics(design, nic_usd))
    raw: list[tuple[str, str, float, float]] = [
        (plat.id, "platforms", float(design.n_domains), _price(plat, "platform")),
        (sw.id, "switches", float(design.bom.switch_count), _price(sw, "switch")),
        *_media_terms(design, catalog),
        (nic.id, "nics", paid_nics, nic_usd),
    ]
    merged: dict[str, list] = {}
    for entry_id, section, q, p in raw:
        if entry_id in merged:
            if merged[entry_id][0] != section:
                raise SpecError(f"catalog id '{entry_id}' names both a {merged[entry_id][0]} and a {section} entry; "
                                "price ranges are keyed by id, so give one of them another id")
            merged[entry_id][1] += q  # one medium on two layers
        else:
            merged[entry_id] = [section, q, p]
    terms = tuple(PriceTerm(entry_id=i, section=sec, quantity=q, price_usd=p)
                  for i, (sec, q, p) in merged.items() if q > 0)
    exp = PriceExposure(design_id=design_id if design_id is not None else design.label, label=design.label,
                        family=design.family.value, platform=design.platform, n_gpus=design.n_gpus,
                        capex_usd=design.capex_usd, terms=terms)
    at_point = exp.capex_at({})
    if abs(at_point - design.capex_usd) > REPRODUCE_RTOL * max(abs(design.capex_usd), 1.0):
        raise SpecError(f"design '{exp.design_id}': capex at this catalog's prices is ${at_point:,.2f}, the design's "
                        f"is ${design.capex_usd:,.2f}; pass the catalog it was priced with (same files and "
                        "price_multipliers)")
    return exp


# ----------------------------------------------------------------------------------------------
# Ranges
# ----------------------------------------------------------------------------------------------


def as_price_ranges(source: Any) -> dict[str, PriceRange]:
    """Price ranges by entry id from a mapping of id -> range-like record (any object with low_usd,
    mode_usd, high_usd and distribution, e.g. the catalog's own range records), or from an object
    with a `price_ranges()` method returning such a mapping (a catalog that carries ranges)."""
    if hasattr(source, "price_ranges") and callable(source.price_ranges):
        source = source.price_ranges()
    if not isinstance(source, Mapping):
        raise SpecError(f"ranges = {type(source).__name__}: allowed: a mapping of entry id to price range, "
                        "or a catalog with price_ranges()")
    out: dict[str, PriceRange] = {}
    for entry_id, r in source.items():
        if isinstance(r, PriceRange):
            out[str(entry_id)] = r
            continue
        try:
            fields = {k: getattr(r, k) if not isinstance(r, Mapping) else r[k]
                      for k in ("low_usd", "mode_usd", "high_usd", "distribution")}
        except (AttributeError, KeyError):
            raise SpecError(f"ranges.{entry_id} = {r!r}: needs low_usd, mode_usd, high_usd and distribution") from None
        dist = fields["distribution"]
        fields["distribution"] = getattr(dist, "value", dist)
        try:
            out[str(entry_id)] = PriceRange(**fields)
        except ValueError as err:
            raise SpecError(f"ranges.{entry_id}: {_first_error(err)}") from None
    return out


def _first_error(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    if callable(errors):
        e = errors()[0]
        return f"{'.'.join(str(x) for x in e['loc']) or 'range'}: {e['msg']}"
    return str(err)


def band_ranges(exposures: Sequence[PriceExposure], fraction: float, distribution: Distribution = "uniform",
                sections: Sequence[str] | None = None) -> dict[str, PriceRange]:
    """Every price id of the designs within +-fraction of its point price ("prices off by 20 %":
    fraction 0.2), optionally only the ids of some catalog sections (platforms, switches, media, nics)."""
    if not 0 <= fraction <= 1:
        raise SpecError(f"fraction = {fraction}: allowed: 0 <= fraction <= 1")
    allowed = ("platforms", "switches", "media", "nics")
    for sec in sections or ():
        if sec not in allowed:
            raise SpecError(f"sections: '{sec}' is not a priced section of a design; allowed: {', '.join(allowed)}")
    out: dict[str, PriceRange] = {}
    for t in (t for e in exposures for t in e.terms):
        if sections is None or t.section in sections:
            out[t.entry_id] = PriceRange(low_usd=t.price_usd * (1 - fraction), mode_usd=t.price_usd,
                                         high_usd=t.price_usd * (1 + fraction), distribution=distribution)
    return out


# ----------------------------------------------------------------------------------------------
# The vectorized core
# ----------------------------------------------------------------------------------------------


def exposure_matrix(exposures: Sequence[PriceExposure]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """(ids in sorted order, point prices (ids,), quantities (ids x designs), rest (designs,)).
    Every design must carry the same point price for an id (one catalog)."""
    point: dict[str, float] = {}
    for e in exposures:
        for t in e.terms:
            if point.setdefault(t.entry_id, t.price_usd) != t.price_usd:
                raise SpecError(f"design '{e.design_id}': price of '{t.entry_id}' is {t.price_usd:g}, another design's "
                                f"is {point[t.entry_id]:g}; all designs must be priced with one catalog")
    ids = tuple(sorted(point))
    col = {i: k for k, i in enumerate(ids)}
    q = np.zeros((len(ids), len(exposures)))
    for j, e in enumerate(exposures):
        for t in e.terms:
            q[col[t.entry_id], j] += t.quantity
    return ids, np.array([point[i] for i in ids]), q, np.array([e.rest_usd for e in exposures], dtype=float)


def draw_prices(ranges: Sequence[PriceRange], samples: int, rng: np.random.Generator) -> np.ndarray:
    """samples x len(ranges) prices, each column independent: the inverse CDF of its range applied to
    one U(0, 1) matrix of len(ranges) x samples (row k: the draws of range k; the result is its
    transpose, a view). Uniform: a + u (b - a). Triangular (a, c, b): F(c) = (c - a) / (b - a);
    x = a + sqrt(u (b - a)(c - a)) for u < F(c), else b - sqrt((1 - u)(b - a)(b - c))."""
    u = rng.random((len(ranges), samples))
    for k, r in enumerate(ranges):  # one vectorized row per price id
        a, c, b = r.low_usd, r.mode_usd, r.high_usd
        row = u[k]
        if r.distribution == "triangular" and b > a:
            below = row < (c - a) / (b - a)
            root = np.sqrt(np.where(below, row * ((b - a) * (c - a)), (1 - row) * ((b - a) * (b - c))))
            u[k] = np.where(below, a + root, b - root)
        else:  # uniform, and zero-width ranges of either kind (the point price)
            row *= b - a
            row += a
    return u.T


def front_mask(capex_usd: np.ndarray, time_to_train_s: np.ndarray) -> np.ndarray:
    """draws x designs: on the (capex, time) front of each draw (ties: module docstring).

    capex_usd is draws x designs; time_to_train_s (designs,) is the same in every draw, so the designs
    are sorted by it once and grouped by equal time. Per group and draw: the group's least capex m_g
    (np.minimum.reduceat), the least capex of every strictly faster design (the cumulative minimum of
    the m of the groups before), and the design holding m_g (the first in input order at a tie, as
    argmin returns). A group's design is on the front iff m_g is below that cumulative minimum. All of
    it is vectorized over the draws; the only loop is over the groups of tied times. The work is done
    on designs x draws (capex_usd.T), where a design's draws are contiguous: pass the transpose of a
    C-ordered designs x draws matrix to avoid a copy."""
    capex_t = np.asarray(capex_usd, dtype=float)
    capex_t = np.atleast_2d(capex_t).T  # designs x draws
    t = np.asarray(time_to_train_s, dtype=float)
    n_draws = capex_t.shape[1]
    order = np.argsort(t, kind="stable")
    cs = capex_t[order]
    ts = t[order]
    new_group = np.r_[True, ts[1:] != ts[:-1]]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.r_[starts, len(ts)])
    gmin = np.minimum.reduceat(cs, starts, axis=0) if len(starts) < len(ts) else cs  # groups x draws
    faster = np.empty_like(gmin)
    faster[0] = np.inf
    np.minimum.accumulate(gmin[:-1], axis=0, out=faster[1:])  # least capex of the strictly faster groups
    group_on = gmin < faster
    on_sorted = np.zeros(cs.shape, dtype=bool)
    single = sizes == 1
    on_sorted[starts[single]] = group_on[single]
    cols = np.arange(n_draws)
    for g in np.flatnonzero(~single):
        k = cs[starts[g]:starts[g] + sizes[g]].argmin(axis=0)  # first of the group at its least capex
        on_sorted[starts[g] + k, cols] = group_on[g]
    out = np.empty_like(on_sorted)
    out[order] = on_sorted
    return out.T


def _limit_ok(values: np.ndarray, lim: GoalLimit) -> np.ndarray:
    """DesignPoint.excess(lim) <= 0, elementwise and with the same arithmetic."""
    scale = abs(lim.rhs) if lim.rhs else 1.0
    excess = (values - lim.rhs) / scale if lim.sense == "<=" else (lim.rhs - values) / scale
    return excess <= 0


def goal_optimum(capex_usd: np.ndarray, points: Sequence[DesignPoint], goal: Goal) -> np.ndarray:
    """Per draw, the index of the goal's answer among `points` (-1: no design meets the limits), with
    answer_goal's order: least target, then capex, then time, then design_id. `points` give the fixed
    metrics (time, power); capex_usd (draws x designs) replaces their capex."""
    if goal.is_front:
        raise SpecError("goal = front: it has no single answer; give goal.minimize")
    capex = np.atleast_2d(np.asarray(capex_usd, dtype=float))

    def metric(name: str) -> np.ndarray:
        if name == "capex_usd":
            return capex
        return np.array([p.metric(name) for p in points])[None, :]

    feasible = np.ones(capex.shape, dtype=bool)
    for lim in goal.subject_to:
        feasible &= _limit_ok(metric(lim.metric), lim)
    target = np.broadcast_to(metric(goal.minimize), capex.shape)
    best_target = np.where(feasible, target, np.inf).min(axis=1, keepdims=True)
    cand = feasible & (target == best_target)
    best_capex = np.where(cand, capex, np.inf).min(axis=1, keepdims=True)
    cand &= capex == best_capex
    # Ties on target and capex: the least time, then the least design_id (answer_goal's key).
    rank = sorted(range(len(points)), key=lambda j: (points[j].time_to_train_s, points[j].design_id))
    ranked = cand[:, rank]
    idx = np.asarray(rank)[ranked.argmax(axis=1)]
    return np.where(ranked.any(axis=1), idx, -1)


# ----------------------------------------------------------------------------------------------
# The analysis
# ----------------------------------------------------------------------------------------------


def _points(exposures: Sequence[PriceExposure], time_to_train_s: np.ndarray,
            power_w: Sequence[float] | None) -> list[DesignPoint]:
    power = np.full(len(exposures), np.nan) if power_w is None else np.asarray(power_w, dtype=float)
    return [DesignPoint(e.design_id, e.label, e.family, e.platform, e.n_gpus, e.capex_usd, float(power[j]),
                        float(time_to_train_s[j])) for j, e in enumerate(exposures)]


def _check_inputs(exposures: Sequence[PriceExposure], time_to_train_s: Any, samples: int, seed: int,
                  goal: Goal, power_w: Sequence[float] | None) -> np.ndarray:
    if not exposures:
        raise SpecError("exposures: empty; give at least one design")
    ids = [e.design_id for e in exposures]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecError(f"exposures: design_id {dup[0]!r} appears twice; design ids must be unique")
    t = np.asarray(time_to_train_s, dtype=float)
    if t.shape != (len(exposures),):
        raise SpecError(f"time_to_train_s: {t.size} values for {len(exposures)} designs; give one per design")
    if not np.all(np.isfinite(t) & (t > 0)):
        j = int(np.flatnonzero(~(np.isfinite(t) & (t > 0)))[0])
        raise SpecError(f"time_to_train_s[{j}] = {t[j]}: must be finite and > 0 (leave infeasible designs out)")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or not 1 <= samples <= 10_000_000:
        raise SpecError(f"samples = {samples!r}: allowed: an integer in 1 .. 10,000,000")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecError(f"seed = {seed!r}: allowed: an integer >= 0")
    names = ([goal.minimize] if goal.minimize else []) + [lim.metric for lim in goal.subject_to]
    for n in names:
        if n not in GOAL_METRICS:
            raise SpecError(f"goal names {n}: the price analysis takes {', '.join(GOAL_METRICS)} (capex is the only "
                            "one that moves with prices; a metric built on capex needs its own price terms)")
    needs_power = [n for n in names if n in ("power_w", "energy_j", "energy_mwh")]
    if needs_power:
        if power_w is None or len(power_w) != len(exposures):
            raise SpecError(f"goal names {needs_power[0]}: pass power_w, one value per design")
        if not all(math.isfinite(p) and p >= 0 for p in power_w):
            raise SpecError("power_w: every value must be finite and >= 0")
    return t


def robustness(exposures: Sequence[PriceExposure], time_to_train_s: Sequence[float] | np.ndarray,
               ranges: Any, samples: int, seed: int, goal: Goal | None = None,
               power_w: Sequence[float] | None = None) -> RobustnessResult:
    """Each design's chance to be on the (capex, time) front and to be the goal's answer when the
    prices are drawn from `ranges` (a mapping id -> PriceRange, or anything as_price_ranges takes),
    and its capex quantiles. `samples` draws from numpy.random.default_rng(seed). `goal` defaults to
    the front; `power_w` (one per design) is needed only by goals on power or energy.

    Memory: the prices (ids x draws) and the capex (designs x draws) in float64, and about as much
    again in temporaries: some 2 x 8 x samples x (ids + designs) bytes (100,000 draws of 50 designs
    over 30 ids: a 150 MB peak, measured)."""
    goal = goal if goal is not None else Goal()
    t = _check_inputs(exposures, time_to_train_s, samples, seed, goal, power_w)
    rng_by_id = as_price_ranges(ranges)
    ids, point, q, rest = exposure_matrix(exposures)
    drawn = [k for k, i in enumerate(ids) if i in rng_by_id]
    fixed = [k for k, i in enumerate(ids) if i not in rng_by_id]
    for k in drawn:
        mode = rng_by_id[ids[k]].mode_usd
        if abs(mode - point[k]) > REPRODUCE_RTOL * max(abs(point[k]), 1.0):
            raise SpecError(f"ranges.{ids[k]}: mode_usd = {mode:g} but the designs were priced at {point[k]:g}; the "
                            "mode is the catalog's price_usd (with price_multipliers, scale the range too)")
    # Ids without a range are constants: fold them into each design's rest.
    base = rest + point[fixed] @ q[fixed]
    prices = draw_prices([rng_by_id[ids[k]] for k in drawn], samples, np.random.default_rng(seed))
    # The one matrix product, laid out designs x draws (each design's draws contiguous, which the
    # front, the quantiles and the means read along); `capex` is its draws x designs view.
    capex_t = q[drawn].T @ prices.T + base[:, None]
    capex = capex_t.T
    capex_point = (point @ q + rest)[None, :]

    on_front = front_mask(capex, t)
    point_front = front_mask(capex_point, t)[0]
    p_front = on_front.mean(axis=0)
    p_same_front = float(np.all(on_front == point_front, axis=1).mean())
    quant = np.quantile(capex_t, QUANTILES, axis=1)  # numpy's default (linear) interpolation
    p_opt: np.ndarray | None = None
    point_opt: np.ndarray | None = None
    p_unmet: float | None = None
    if not goal.is_front:
        points = _points(exposures, t, power_w)
        best = goal_optimum(capex, points, goal)
        p_opt = np.bincount(best[best >= 0], minlength=len(exposures)) / samples
        p_unmet = float(np.mean(best < 0))
        point_opt = np.arange(len(exposures)) == goal_optimum(capex_point, points, goal)[0]
    designs = tuple(
        DesignRobustness(
            design_id=e.design_id, label=e.label, time_to_train_s=float(t[j]),
            capex_point_usd=float(capex_point[0, j]), on_point_front=bool(point_front[j]),
            point_optimum=None if point_opt is None else bool(point_opt[j]),
            p_on_front=float(p_front[j]), p_optimum=None if p_opt is None else float(p_opt[j]),
            capex_mean_usd=float(capex_t[j].mean()), capex_p5_usd=float(quant[0, j]),
            capex_p50_usd=float(quant[1, j]), capex_p95_usd=float(quant[2, j]))
        for j, e in enumerate(exposures))
    return RobustnessResult(samples=int(samples), seed=int(seed), goal=goal_text(goal),
                            price_ids=tuple(ids[k] for k in drawn), fixed_price_ids=tuple(ids[k] for k in fixed),
                            designs=designs, p_same_front=p_same_front, p_goal_unmet=p_unmet)


def goal_candidate_mask(goal: Any, exposures: Sequence[PriceExposure], time_to_train_s: Sequence[float] | np.ndarray,
                        ranges: Any) -> np.ndarray:
    """candidate_mask where leaving a design out changes none of the goal's probabilities: the front,
    or a goal that minimizes capex or time under '<=' limits on capex and time. Any other goal (power
    or energy minimized or limited, capex limited from below) may be answered by a design beaten on
    capex and time at every price, so it keeps every design."""
    capex_time = ("capex_usd", "time_to_train_s", "time_to_train_days")
    safe = goal is None or goal.is_front or (goal.minimize in capex_time and all(
        lim.metric in capex_time and lim.sense == "<=" for lim in goal.subject_to))
    if safe:
        return candidate_mask(exposures, time_to_train_s, ranges)
    return np.ones(len(exposures), dtype=bool)


def candidate_mask(exposures: Sequence[PriceExposure], time_to_train_s: Sequence[float] | np.ndarray,
                    ranges: Any) -> np.ndarray:
    """Mask of the designs kept by the candidate rule (module docstring): design j is left out when
    some design i dominates it at every price of the ranges' box. capex_j - capex_i is linear in the
    prices, so its least value over the box takes each price at its low end where j's quantity
    exceeds i's and at its high end where it is below (ids without a range at their point price);
    i dominates j everywhere when that least value is > 0 and i is at least as fast, or >= 0 and i is
    strictly faster. Designs at the same time and the same capex everywhere are all kept (which one a
    front or a goal keeps is decided per draw). Prices are shared, so this is sharper than comparing
    each design's own low and high capex. A dropped design is dominated in every draw and dominance
    is transitive, so dropping it changes no other design's p_on_front, nor p_optimum for a goal that
    minimizes capex or time under '<=' limits on capex and time. One pass per design, vectorized over
    the others and the ids: designs^2 x ids work."""
    t = np.asarray(time_to_train_s, dtype=float)
    if t.shape != (len(exposures),):
        raise SpecError(f"time_to_train_s: {t.size} values for {len(exposures)} designs; give one per design")
    rng_by_id = as_price_ranges(ranges)
    ids, point, q, rest = exposure_matrix(exposures)
    low = np.array([rng_by_id[i].low_usd if i in rng_by_id else p for i, p in zip(ids, point)])
    high = np.array([rng_by_id[i].high_usd if i in rng_by_id else p for i, p in zip(ids, point)])
    keep = np.ones(len(exposures), dtype=bool)
    for i in range(len(exposures)):
        d = q - q[:, [i]]  # ids x designs: q_j - q_i
        least = np.where(d > 0, d * low[:, None], d * high[:, None]).sum(axis=0) + (rest - rest[i])
        dominated = ((t[i] <= t) & (least > 0)) | ((t[i] < t) & (least >= 0))
        dominated[i] = False
        keep &= ~dominated
    return keep


__all__ = ["PriceRange", "PriceTerm", "PriceExposure", "DesignRobustness", "RobustnessResult", "price_exposure",
           "as_price_ranges", "band_ranges", "exposure_matrix", "draw_prices", "front_mask", "goal_optimum",
           "robustness", "candidate_mask"]
