"""Availability of a cluster under component failures, and the spare HB domains that hold a target.

Pure functions of their arguments (no I/O). Sources: railonly.md §6 (what a failure takes out in each
family; the paper itself gives no quantitative model), the reliability defaults of
designer.spec.network_study.FailureRates (Llama 3 Table 5; Singh et al. 2021; MTTRs assumed).

Model
-----
Every component fails and is repaired independently; at a random instant component c is down with its
steady-state unavailability u_c = MTTR / (MTBF + MTTR) (alternating renewal process).

A *unit* is what one GPU-side failure removes from a job:
  * rail-only: the whole HB domain (unit = K GPUs). A GPU's rail peers in other domains are reachable
    only over its own rail, so the failed GPU's work cannot move alone; the domain moves to a spare
    domain (railonly.md §6, first remedy).
  * rail-optimized, oversubscribed, fat-tree: a tensor-parallel group of `unit_gpus` GPUs (capped at
    K; it must divide K). The any-to-any fabric lets it move to free GPUs of a spare domain while the
    rest of its domain keeps working (its in-domain data-parallel traffic then crosses the network).
A unit is down when any of its GPUs, their hosts (hosts of `gpus_per_host` GPUs), NICs or NIC links is
down, or any leaf switch it attaches to is down (a leaf failure cuts every GPU under it in every family,
railonly.md §6). Failures above the leaves (spine/core switches and links) only remove ECMP paths:
they reduce bandwidth, not capacity; we report their expected bandwidth fraction and rates.

Expected capacity (exact under independence): the fraction of units up,
    a = (1-u_gpu)^u (1-u_host)^hosts (1-u_nic)^(u n) (1-u_link)^(u n) (1-u_switch)^leaves_per_unit
with n NICs per GPU.

Spares. Leaves that all cut the same units form a *leaf group* (rail-only: the leaves of every rail
over one block of h domains; rail-optimized: the leaves of one unit's ranks over one block); a group is
down with probability 1 - (1-u_switch)^leaves_per_group. The number of units down is bounded above by
    X = X_unit + m X_group,   X_unit ~ Binomial(units, q),   X_group ~ Binomial(groups, group_down)
where q = 1 - (a unit's own GPU/host/NIC/link up probability) and m the units a down group cuts.
In every aligned layout the groups partition the units, and then exactly
    P(loss <= s) = sum_j P(X_group = j) P(Bin(units - j m, q) <= s - j m)
(the units of down groups are lost whatever their own state; a partial last block is counted as a
full group, which only over-counts). Otherwise (misaligned layouts) the sum X above over-counts when a
group failure hits an already-down unit, so it is stochastically larger than the true loss:
    P(X <= s) = sum_j P(X_group = j) P(X_unit <= s - m j).
Either way spares sized on it suffice (conservative, and exact for full aligned groups).
With Q(D) the `confidence`-quantile of X in a built cluster of D domains, the spare domains it needs are
    g(D) = ceil(Q(D) / units_per_domain),
and a job of J domains with target fraction f is held when  ceil(f J) <= D - g(D)  (and J <= D).
Q, and so g, is non-decreasing in D when m is constant (every family once rails are longer than a leaf);
`required_spares` returns the smallest built D for a job, D - J being the spares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from designer.errors import SpecError
from designer.network.topology import Family, plane_layout, rail_leaf_count, tiers_needed
from designer.spec.network_study import FailureRates

HOURS_PER_YEAR = 8766.0  # 365.25 days


@dataclass(frozen=True)
class Exposure:
    """What failures can hit in one built design (counts over the whole cluster)."""

    family: Family
    n_domains: int
    hb_domain_size: int
    nics_per_gpu: int
    unit_gpus: int  # GPUs removed from the job by one GPU-side failure
    units_per_domain: int
    n_units: int
    hosts_per_unit: int
    leaf_count: int  # switches whose failure cuts GPUs (the leaves; every switch of a one-tier plane)
    leaves_per_unit: int  # leaves one unit attaches to
    # Leaf groups: disjoint sets of leaves whose members all cut the same units (e.g. the leaves of
    # every rail over one block of h domains in rail-only), so a group is down when any member is.
    leaf_groups: int
    leaves_per_group: int
    units_per_group: int  # units a down group cuts (the last, partial block counted whole: an upper bound)
    groups_partition_units: bool  # every unit hangs on exactly one group (all aligned layouts)


def blocks_touched(span: int, block: int) -> int:
    """Aligned blocks of `block` consecutive items that `span` consecutive items (starting at a multiple
    of span) overlap: exact when one divides the other, an upper bound (ceil + 1) otherwise."""
    if span % block == 0:
        return span // block
    if block % span == 0:
        return 1
    return -(-span // block) + 1


def unit_size(family: Family | str, hb_domain_size: int, unit_gpus: int) -> int:
    """K for rail-only; min(unit_gpus, K) elsewhere, which must divide K."""
    family = Family(family)
    if family == Family.rail_only:
        return hb_domain_size
    u = min(unit_gpus, hb_domain_size)
    if hb_domain_size % u:
        raise SpecError(f"unit_gpus={unit_gpus}: must divide the HB domain size {hb_domain_size}")
    return u


def exposure(family: Family | str, n_domains: int, hb_domain_size: int, radix: int, *,
             nics_per_gpu: int = 1, unit_gpus: int = 8, gpus_per_host: int = 8) -> Exposure:
    """Units, leaves and who hangs on whom, from the closed form's leaf layout (topology.py docstring,
    physical convention: rail-pure leaves for rail-optimized/oversubscribed, consecutive GPUs for
    fat-tree, one Clos per rail for rail-only)."""
    family = Family(family)
    k, d, npg = hb_domain_size, n_domains, nics_per_gpu
    if d < 1:
        raise SpecError(f"n_domains={d}: must be >= 1")
    u = unit_size(family, k, unit_gpus)
    per_domain = k // u
    n_units = d * per_domain
    planes, endpoints = plane_layout(family, d * k, k, npg)
    h = radix // 2
    levels = tiers_needed(endpoints, radix)
    # (leaves, leaves per unit, groups, leaves per group, units per group), per family and layout.
    if levels == 1:
        leaves = math.ceil(planes / (radix // endpoints))
        if family == Family.rail_only:
            # A switch holds floor(R/D) whole rails, one GPU of every domain on each: a domain hangs on
            # every switch, and any switch failure cuts every domain.
            layout = (leaves, leaves, 1, leaves, n_units)
        else:
            layout = (leaves, npg, 1, leaves, n_units)  # one switch per plane serves every GPU
    elif family == Family.rail_only:
        blocks = -(-d // h)  # a leaf serves one rank of h consecutive domains
        layout = (planes * blocks, planes, blocks, planes, min(h, d))
    elif family == Family.fat_tree:
        leaves = planes * -(-endpoints // h)  # a leaf takes h consecutive GPUs (whole domains first)
        if h % u == 0:  # a leaf holds h/u whole units; the NIC planes' leaves over them form a group
            layout = (leaves, npg, leaves // npg, npg, h // u)
        elif u % h == 0:  # a unit spans u/h leaves per plane; they form a group cutting that one unit
            layout = (leaves, npg * (u // h), n_units, npg * (u // h), 1)
        else:  # no alignment: every leaf its own group, cutting the units it overlaps (upper bound)
            layout = (leaves, npg * blocks_touched(u, h), leaves, 1, blocks_touched(h, u), False)
    else:  # rail-pure leaves: rail-optimized, oversubscribed
        leaves = planes * rail_leaf_count(k, d, h)
        if d > h:
            blocks = -(-d // h)
            # leaf = one rank of h domains; the u ranks x npg planes of a unit row over one block
            # cut the same h units.
            layout = (leaves, npg * u, (k // u) * blocks, npg * u, h)
        else:
            rpl = min(k, h // d)  # whole short rails packed per leaf
            if rpl % u == 0:
                layout = (leaves, npg, leaves // npg, npg, d * (rpl // u))
            elif u % rpl == 0:
                layout = (leaves, npg * (u // rpl), k // u, npg * (u // rpl), d)
            else:
                layout = (leaves, npg * blocks_touched(u, rpl), leaves, 1, d * blocks_touched(rpl, u), False)
    leaves, per_unit, groups, per_group, cut, partition = (layout + (True,))[:6]
    return Exposure(family=family, n_domains=d, hb_domain_size=k, nics_per_gpu=npg, unit_gpus=u,
                    units_per_domain=per_domain, n_units=n_units, hosts_per_unit=blocks_touched(u, gpus_per_host),
                    leaf_count=leaves, leaves_per_unit=min(per_unit, leaves), leaf_groups=groups,
                    leaves_per_group=per_group, units_per_group=min(cut, n_units),
                    groups_partition_units=partition)


def unit_local_up(e: Exposure, rates: FailureRates) -> float:
    """Probability that a unit's own GPUs, hosts, NICs and NIC links are all up."""
    u, n = e.unit_gpus, e.nics_per_gpu
    return ((1 - rates.gpu.unavailability) ** u * (1 - rates.host.unavailability) ** e.hosts_per_unit
            * (1 - rates.nic.unavailability) ** (u * n) * (1 - rates.link.unavailability) ** (u * n))


def expected_capacity_fraction(e: Exposure, rates: FailureRates) -> float:
    """Expected fraction of the cluster's units up at a random instant (no spares)."""
    return unit_local_up(e, rates) * (1 - rates.switch.unavailability) ** e.leaves_per_unit


def _binom_cdf(n: int, q: float, s_max: int) -> np.ndarray:
    """P(Bin(n, q) <= s) for s = 0..s_max, by the pmf recurrence in log space (no underflow)."""
    s_max = max(0, min(s_max, n))
    if q <= 0.0:
        return np.ones(s_max + 1)
    if q >= 1.0:
        out = np.zeros(s_max + 1)
        if s_max >= n:
            out[n] = 1.0
        return out
    k = np.arange(s_max, dtype=float)
    steps = np.log(n - k) - np.log(k + 1) + math.log(q) - math.log1p(-q)
    logpmf = n * math.log1p(-q) + np.concatenate(([0.0], np.cumsum(steps)))
    return np.minimum(1.0, np.cumsum(np.exp(logpmf)))


def loss_cdf(n_units: int, q_unit: float, n_groups: int, q_group: float, units_per_group: int, s_max: int,
             partition: bool = False) -> np.ndarray:
    """P(X <= s), s = 0..s_max, for the units lost to unit-local failures and to leaf groups.

    partition=False: X = Bin(n_units, q_unit) + m Bin(n_groups, q_group), m = units_per_group (an upper
    bound on the loss whatever the layout). partition=True (every unit in exactly one group of m): the
    units of down groups are lost whatever their own state, so given j groups down
    X = j m + Bin(n_units - j m, q_unit), exact for full groups and conservative for a partial last one."""
    m = units_per_group
    jmax = min(n_groups, s_max // m)
    cl = _binom_cdf(n_groups, q_group, jmax)
    pl = np.diff(np.concatenate(([0.0], cl)))
    out = np.zeros(s_max + 1)
    cu_all = None
    for j in range(jmax + 1):
        shift = j * m
        rest = max(0, n_units - shift) if partition else n_units
        if partition or cu_all is None:
            cu = _binom_cdf(rest, q_unit, s_max - shift)
            if s_max - shift > rest:
                cu = np.concatenate((cu, np.ones(s_max - shift - rest)))
            if not partition:
                cu_all = cu
        else:
            cu = cu_all[: s_max + 1 - shift]
        out[shift:] += pl[j] * cu[: s_max + 1 - shift]
    return out


def loss_quantile(n_units: int, q_unit: float, n_groups: int, q_group: float, units_per_group: int,
                  confidence: float, partition: bool = False) -> int:
    """The smallest s with P(X <= s) >= confidence (units), X as in loss_cdf."""
    if not 0 < confidence < 1:
        raise SpecError(f"confidence={confidence!r}: must be in (0, 1)")
    worst = n_units if partition else n_units + units_per_group * n_groups
    mean = n_units * q_unit + units_per_group * n_groups * q_group
    sd = math.sqrt(n_units * q_unit * (1 - q_unit)) + units_per_group * math.sqrt(n_groups * q_group * (1 - q_group))
    s_max = int(min(worst, mean + 12 * sd + 4 * units_per_group + 16))
    while True:
        cdf = loss_cdf(n_units, q_unit, n_groups, q_group, units_per_group, s_max, partition)
        hit = np.nonzero(cdf >= confidence)[0]
        if hit.size:
            return int(hit[0])
        if s_max >= worst:
            return worst
        s_max = min(worst, 2 * s_max + 1)


def group_down(e: Exposure, rates: FailureRates) -> float:
    """Probability that a leaf group is down (any of its leaves down)."""
    return 1.0 - (1.0 - rates.switch.unavailability) ** e.leaves_per_group


def lost_units_quantile(e: Exposure, rates: FailureRates, confidence: float) -> int:
    """Q(D): the confidence-quantile of X = Bin(units, q) + units_per_group Bin(groups, group_down)."""
    return loss_quantile(e.n_units, 1.0 - unit_local_up(e, rates), e.leaf_groups, group_down(e, rates),
                         e.units_per_group, confidence, e.groups_partition_units)


def spare_domains_needed(e: Exposure, rates: FailureRates, confidence: float) -> int:
    """g(D): spare domains that cover the confidence-quantile of lost units in this built design."""
    return -(-lost_units_quantile(e, rates, confidence) // e.units_per_domain)


def job_domains_held(e: Exposure, rates: FailureRates, confidence: float, target_fraction: float = 1.0) -> int:
    """The largest job J (domains) a built design of D domains holds: ceil(f J) <= D - g(D), J <= D."""
    up = e.n_domains - spare_domains_needed(e, rates, confidence)
    if up <= 0:
        return 0
    return min(e.n_domains, math.floor(up / target_fraction + 1e-9))


@dataclass(frozen=True)
class SpareRequirement:
    job_domains: int
    built_domains: int
    spare_domains: int
    lost_units_quantile: int  # of the built design, at the confidence
    exposure: Exposure


def required_spares(family: Family | str, job_domains: int, hb_domain_size: int, radix: int, rates: FailureRates,
                    *, confidence: float, target_fraction: float = 1.0, nics_per_gpu: int = 1,
                    unit_gpus: int = 8, max_domains: int | None = None) -> SpareRequirement:
    """The smallest built D >= J with ceil(f J) <= D - g(D): the least fixed point of
    D = max(J, ceil(f J) + g(D)), reached from D = J since g is non-decreasing (module docstring)."""
    need = math.ceil(target_fraction * job_domains - 1e-9)
    limit = max_domains if max_domains is not None else 64 * job_domains + 1024
    d = job_domains
    while True:
        e = exposure(family, d, hb_domain_size, radix, nics_per_gpu=nics_per_gpu, unit_gpus=unit_gpus,
                     gpus_per_host=rates.gpus_per_host)
        g = spare_domains_needed(e, rates, confidence)
        nxt = max(job_domains, need + g)
        if nxt <= d:
            return SpareRequirement(job_domains, d, d - job_domains, lost_units_quantile(e, rates, confidence), e)
        if nxt > limit:
            raise SpecError(f"{job_domains} job domains need more than {limit} built domains at confidence "
                            f"{confidence}: the failure rates are too high for any spare count")
        d = nxt


@dataclass(frozen=True)
class UpperTierFailures:
    """Failures above the leaves: ECMP loses paths, the GPUs stay connected."""

    switch_count: float
    link_count: float
    switch_failures_per_year: float
    link_failures_per_year: float
    bandwidth_fraction: float  # expected fraction of upper-tier capacity available


def upper_tier_failures(upper_switches: float, upper_links: float, upper_link_layers: int,
                        rates: FailureRates) -> UpperTierFailures:
    """Expected upper-tier capacity: each of the `upper_link_layers` layers above the leaves keeps a
    link's capacity when the link and the switch above it are up, so a layer keeps (1-u_link)(1-u_sw)
    of its capacity on average; crossing every layer, the first-order fraction is that product
    (layers independent). Rates are failures per year over the fabric (count x 8,766 h / MTBF)."""
    per_layer = (1 - rates.link.unavailability) * (1 - rates.switch.unavailability)
    return UpperTierFailures(
        switch_count=upper_switches, link_count=upper_links,
        switch_failures_per_year=upper_switches * HOURS_PER_YEAR / rates.switch.mtbf_h,
        link_failures_per_year=upper_links * HOURS_PER_YEAR / rates.link.mtbf_h,
        bandwidth_fraction=per_layer ** upper_link_layers,
    )


__all__ = [
    "Exposure", "HOURS_PER_YEAR", "SpareRequirement", "UpperTierFailures", "blocks_touched", "exposure",
    "expected_capacity_fraction", "job_domains_held", "loss_cdf", "loss_quantile", "required_spares",
    "group_down", "lost_units_quantile", "spare_domains_needed", "unit_local_up", "unit_size", "upper_tier_failures",
]
