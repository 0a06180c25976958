"""Goodput of a synchronous training job under component failures: interruptions, checkpoints, restarts.

Pure functions of their arguments (no I/O). Builds on designer.analysis.failures (what a failure takes
out of a job in each family, the spare HB domains that hold a target) and the per-component rates of
designer.spec.network_study.FailureRates (Llama 3 Table 5; Singh et al. 2021; MTTRs assumed).

Interruptions
-------------
A synchronous job (every rank waits for every other at each step) stops when any component it uses
fails. Components fail independently at constant rates (exponential lifetimes), so the job's
interruptions are a Poisson process with rate (a series system)
    lambda = n_gpu / MTBF_gpu + n_host / MTBF_host + n_nic / MTBF_nic + n_nic_link / MTBF_link
           + n_leaf / MTBF_switch + f (n_upper_switch / MTBF_switch + n_upper_link / MTBF_link)
           + n_gpu * other_per_gpu_h
and the job's mean time between interruptions is M = 1 / lambda. n_* count what the job uses: its own
GPUs, hosts (ceil(GPUs / gpus_per_host)), NICs and NIC-to-leaf links, and the whole fabric's switches
and inter-switch links (idle spare domains share the leaves and spines). A link's rate covers the link
with its transceivers or cable (FailureRates.link: Llama 3's "network switch/cable" events), so optics
carry no separate rate. f (`upper_tier_interrupt_fraction`, default 1) is the share of spine/core
failures that stop the job: such a failure only removes ECMP paths (failures.py), but the RDMA queue
pairs routed over it time out and the collective aborts -- Llama 3 counts its switch/cable events among
the job interruptions (Dubey et al. 2024 §3.3.4, Table 5). `other_per_gpu_h` adds interruptions that are
not component failures (software, NCCL watchdog): LLAMA3_NON_HARDWARE_PER_GPU_H is Table 5's figure.

What a failure takes out (failures.py docstring, railonly.md §6): a GPU, host, NIC or NIC-link failure
removes its *unit* until repaired -- the whole HB domain in rail-only, a tensor-parallel group of
`unit_gpus` GPUs where the fabric is any-to-any; a host removes the units it touches; a leaf failure cuts
every unit of its leaf group. Spine/core failures remove no GPUs (paths only).

Checkpoints and restart (Daly 2006)
-----------------------------------
Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3):303-312, 2006: with failure-free solve time T_s, compute interval tau
between checkpoints, checkpoint write time delta, restart time R and MTBF M (Poisson failures that may
also strike during checkpoints and restarts), the expected wall time is
    T_w(tau) = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau.
(Each of the T_s/tau segments needs tau + delta failure-free seconds; a segment of length L takes
(e^{L/M} - 1)(M + C) on average where C = M (e^{R/M} - 1) is the mean restart cost, failures during a
restart restarting it.) The goodput fraction is T_s / T_w and the time to train with failures T_w.
Optimum interval: Young 1974 (CACM 17(9):530) tau = sqrt(2 delta M); Daly's higher-order estimate
    tau_opt = sqrt(2 delta M) [1 + (1/3) sqrt(delta / (2M)) + (1/9) delta / (2M)] - delta   (delta < 2M)
    tau_opt = M                                                                           (delta >= 2M).
delta = checkpoint state bytes / storage write bandwidth; R = detection + restart + reload (reload =
state bytes / read bandwidth unless given). Work lost per interruption, to first order: half a
segment plus the restart, (tau + delta) / 2 + R.

Recovery policies (the spares trade; RecoveryPolicy)
----------------------------------------------------
* spare: hot-standby HB domains replace what failed; every interruption costs R_swap = R. Spares must
  cover the units down at once (size them with failures.required_spares); they sit idle, so the
  goodput per *built* GPU is goodput * job GPUs / (job + spare GPUs).
* wait-repair: no spares; the job runs only while every component it uses is up. Under independence
  the long-run fraction of time that holds is the steady-state availability of the series system,
      A = prod_c (1 - u_c)^{n_c},   u_c = MTTR_c / (MTBF_c + MTTR_c)
  over the components whose failure removes GPUs (GPUs, hosts, NICs, NIC links, leaves; failures.py's
  unavailability). Its up periods are exponential with rate lambda_cap (all components up, exponential
  lifetimes), so a wait for repairs lasts (1 - A) / (A lambda_cap) on average (alternating renewal:
  A = E[up] / (E[up] + E[down])), overlapping repairs included. Daly's model with R covers the running
  time T_D, which meets lambda_cap T_D such waits: T_w = T_D (1 + (1/A - 1)) = T_D / A.
* degraded: no spares; the job restarts at once (R) on what is left and runs short of the failed units
  until their repair. By Little's law the GPUs out at a time average sum_i lambda_i MTTR_i g_i (g_i: GPUs
  cause i removes), so throughput is scaled by 1 - that / n_gpus (this assumes the job's work divides
  over any number of units, e.g. data-parallel replicas of one unit; the re-expansion after a repair is
  taken at a checkpoint and not charged).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING, Iterable

from pydantic import Field, field_validator

from designer.analysis.failures import blocks_touched, exposure, required_spares
from designer.errors import SpecError
from designer.network.topology import RAILONLY_V5_PRICES, BillOfMaterials, Convention, Family, bill_of_materials
from designer.spec.base import Record, Result
from designer.spec.network_study import LLAMA3_GPU_HOURS, FailureRates

if TYPE_CHECKING:
    from designer.network.design import NetworkDesign

SECONDS_PER_HOUR = 3600.0

# Interruptions that are not component failures, from Llama 3 Table 5 (Dubey et al. 2024, §3.3.4):
# software bug 54 + NCCL watchdog timeouts 7 + dependency 2 = 63 events over 16,384 GPUs x 54 days
# = 21,233,664 GPU-hours -> 2.97e-6 per GPU-hour. Opt-in: how software failures scale with job size
# is not published, so none are counted by default.
LLAMA3_NON_HARDWARE_PER_GPU_H = 63 / LLAMA3_GPU_HOURS

# Bytes per parameter of a mixed-precision Adam checkpoint: bf16 weights (2) + fp32 master weights (4)
# + fp32 Adam first and second moments (4 + 4) = 14. Rajbhandari et al., "ZeRO", SC 2020, §3.1: the
# training state is 2 + 2 + 12 = 16 bytes/param, of which the 2 of fp16/bf16 gradients are not saved.
# BLOOM's checkpoint "with fp32 optim states and bf16+fp32 weights is 2.3TB" for 176B parameters
# (Bekman, "The Technology Behind BLOOM Training", Hugging Face blog, 2022): 14 bytes/param.
WEIGHT_BYTES_PER_PARAM = 2
MASTER_BYTES_PER_PARAM = 4
ADAM_BYTES_PER_PARAM = 8


def checkpoint_state_bytes(n_params: float, *, weight_bytes: float = WEIGHT_BYTES_PER_PARAM,
                           master_bytes: float = MASTER_BYTES_PER_PARAM,
                           optimizer_bytes: float = ADAM_BYTES_PER_PARAM) -> float:
    """Bytes a full training checkpoint holds: weights + fp32 master copy + optimizer state (defaults:
    bf16 + fp32 + Adam m, v = 14 bytes/param). Pass master_bytes=0 for pure bf16 training, or
    optimizer_bytes=4 for a one-moment optimizer."""
    if not n_params > 0 or math.isinf(n_params):
        raise SpecError(f"n_params={n_params!r}: must be a finite number > 0")
    sizes = (("weight_bytes", weight_bytes), ("master_bytes", master_bytes), ("optimizer_bytes", optimizer_bytes))
    for name, v in sizes:
        if not v >= 0 or math.isinf(v):
            raise SpecError(f"{name}={v!r}: must be a finite number >= 0")
    return n_params * (weight_bytes + master_bytes + optimizer_bytes)


# ------------------------------------------------------------------------------------------------
# What the job uses
# ------------------------------------------------------------------------------------------------


class JobComponents(Record):
    """Counts of what a synchronous job depends on, and what one failure takes out of it. Plain
    numbers, so any family (or a hand-drawn cluster) fits; `components_from_bom` and
    `components_from_design` derive them for the closed-form families."""

    n_gpus: int = Field(ge=1)  # the job's GPUs (spare domains excluded)
    gpus_per_host: int = Field(ge=1)
    nics: int = Field(ge=0)  # the job's NICs
    nic_links: int = Field(ge=0)  # NIC-to-leaf links of the job's NICs
    leaf_switches: int = Field(ge=0)
    upper_switches: tuple[int, ...] = ()  # switches per tier above the leaves, lowest first
    upper_links: tuple[int, ...] = ()  # inter-switch links per layer, leaf-spine first
    unit_gpus: int = Field(ge=1)  # GPUs one GPU, NIC or NIC-link failure removes
    leaf_cut_gpus: int = Field(ge=0)  # GPUs one leaf failure removes (cuts)
    family: Family | None = None  # informational

    @field_validator("upper_switches", "upper_links")
    @classmethod
    def _nonneg(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [x for x in v if x < 0]
        if bad:
            raise ValueError(f"{list(v)}: counts must be >= 0")
        return v

    @property
    def n_hosts(self) -> int:
        return -(-self.n_gpus // self.gpus_per_host)

    @property
    def host_cut_gpus(self) -> int:
        """GPUs one host failure removes: the units its GPUs touch (failures.blocks_touched)."""
        return self.unit_gpus * blocks_touched(self.gpus_per_host, self.unit_gpus)


def components_from_bom(bom: BillOfMaterials, *, job_gpus: int | None = None, gpus_per_host: int = 8,
                        unit_gpus: int = 8) -> JobComponents:
    """A closed-form BOM's counts (designer.network.topology, physical convention). `job_gpus`: the
    job's share of a built cluster with spares (default: all of it); the fabric counts whole. The unit
    and the GPUs a leaf cuts come from failures.exposure (rail-only: the HB domain)."""
    if bom.convention != Convention.physical:
        raise SpecError(f"bom convention={bom.convention.value}: its switch counts may be fractional; "
                        "allowed: physical")
    k = bom.hb_domain_size
    job = bom.n_gpus if job_gpus is None else job_gpus
    if not 1 <= job <= bom.n_gpus or job % k:
        raise SpecError(f"job_gpus={job}: must be a multiple of the HB domain ({k}) in 1..{bom.n_gpus}")
    # A NIC shared by g GPUs is counted for the exposure as one NIC per GPU (designer.network.milp).
    npg = bom.nics_per_gpu if bom.gpus_per_nic == 1 else 1
    e = exposure(bom.family, bom.n_gpus // k, k, bom.radix, nics_per_gpu=npg, unit_gpus=unit_gpus,
                 gpus_per_host=gpus_per_host)
    nics = job * bom.nics_per_gpu // bom.gpus_per_nic
    return JobComponents(
        n_gpus=job, gpus_per_host=gpus_per_host, nics=nics, nic_links=nics,
        leaf_switches=int(bom.tiers[0].switches),
        upper_switches=tuple(int(t.switches) for t in bom.tiers[1:]),
        upper_links=tuple(int(t.up_links) for t in bom.tiers[:-1]),
        unit_gpus=e.unit_gpus, leaf_cut_gpus=min(job, e.units_per_group * e.unit_gpus), family=bom.family,
    )


def components_from_design(design: "NetworkDesign", *, gpus_per_host: int = 8, unit_gpus: int = 8) -> JobComponents:
    """The job of a sized design (designer.network.design.NetworkDesign): its job GPUs (spare domains
    excluded) on the built fabric of its bill of materials."""
    return components_from_bom(design.bom, job_gpus=design.job_gpus, gpus_per_host=gpus_per_host,
                               unit_gpus=unit_gpus)


# ------------------------------------------------------------------------------------------------
# Interruption rate
# ------------------------------------------------------------------------------------------------


class InterruptionRates(Result):
    """The job's interruptions per hour by cause (module docstring)."""

    gpu_per_h: float
    host_per_h: float
    nic_per_h: float
    nic_link_per_h: float
    leaf_switch_per_h: float
    upper_switch_per_h: float
    upper_link_per_h: float
    other_per_h: float

    @property
    def capacity_per_h(self) -> float:
        """Interruptions that also remove GPUs until repaired (GPU, host, NIC, NIC link, leaf)."""
        return self.gpu_per_h + self.host_per_h + self.nic_per_h + self.nic_link_per_h + self.leaf_switch_per_h

    @property
    def total_per_h(self) -> float:
        return self.capacity_per_h + self.upper_switch_per_h + self.upper_link_per_h + self.other_per_h

    @property
    def job_mtbf_h(self) -> float:
        return 1.0 / self.total_per_h if self.total_per_h > 0 else math.inf

    def expected_count(self, hours: float) -> float:
        """Expected interruptions in `hours` of running."""
        return self.total_per_h * hours


def interruption_rates(c: JobComponents, rates: FailureRates, *, other_per_gpu_h: float = 0.0,
                       upper_tier_interrupt_fraction: float = 1.0) -> InterruptionRates:
    """lambda by cause: count / MTBF for each component the job uses (module docstring)."""
    if not other_per_gpu_h >= 0 or math.isinf(other_per_gpu_h):
        raise SpecError(f"other_per_gpu_h={other_per_gpu_h!r}: must be a finite rate >= 0")
    if not 0.0 <= upper_tier_interrupt_fraction <= 1.0:
        raise SpecError(f"upper_tier_interrupt_fraction={upper_tier_interrupt_fraction!r}: must be in [0, 1]")
    f = upper_tier_interrupt_fraction
    return InterruptionRates(
        gpu_per_h=c.n_gpus / rates.gpu.mtbf_h,
        host_per_h=c.n_hosts / rates.host.mtbf_h,
        nic_per_h=c.nics / rates.nic.mtbf_h,
        nic_link_per_h=c.nic_links / rates.link.mtbf_h,
        leaf_switch_per_h=c.leaf_switches / rates.switch.mtbf_h,
        upper_switch_per_h=f * sum(c.upper_switches) / rates.switch.mtbf_h,
        upper_link_per_h=f * sum(c.upper_links) / rates.link.mtbf_h,
        other_per_h=c.n_gpus * other_per_gpu_h,
    )


def job_availability(c: JobComponents, rates: FailureRates) -> float:
    """A = prod_c (1 - u_c)^{n_c} over the job's GPUs, hosts, NICs, NIC links and leaves: the steady-state
    share of time all of them are up (module docstring, wait-repair), in logs for large counts."""
    log_a = (c.n_gpus * math.log1p(-rates.gpu.unavailability) + c.n_hosts * math.log1p(-rates.host.unavailability)
             + c.nics * math.log1p(-rates.nic.unavailability) + c.nic_links * math.log1p(-rates.link.unavailability)
             + c.leaf_switches * math.log1p(-rates.switch.unavailability))
    return math.exp(log_a)


# ------------------------------------------------------------------------------------------------
# Checkpoint interval and Daly's expected wall time
# ------------------------------------------------------------------------------------------------


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young 1974: tau = sqrt(2 delta M)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly 2006's higher-order optimum: sqrt(2 delta M)[1 + sqrt(delta/2M)/3 + (delta/2M)/9] - delta
    for delta < 2M, else M."""
    if math.isinf(mtbf_s):
        return math.inf
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


def daly_wall_time_s(solve_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                     mtbf_s: float) -> float:
    """T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau (Daly 2006), in logs so that it overflows to
    inf rather than raising; T_s (tau + delta) / tau when M is infinite."""
    if not interval_s > 0:
        raise SpecError(f"interval_s={interval_s!r}: must be > 0")
    if math.isinf(mtbf_s):
        return solve_s if math.isinf(interval_s) else solve_s * (interval_s + checkpoint_s) / interval_s
    x = (interval_s + checkpoint_s) / mtbf_s
    log_segment = x if x > 700 else math.log(math.expm1(x))
    log_tw = math.log(mtbf_s) + restart_s / mtbf_s + log_segment + math.log(solve_s / interval_s)
    return math.exp(log_tw) if log_tw < 709 else math.inf


# ------------------------------------------------------------------------------------------------
# Goodput
# ------------------------------------------------------------------------------------------------


class RecoveryPolicy(str, Enum):
    spare = "spare"  # hot-standby domains: restart at once on healthy hardware
    wait_repair = "wait-repair"  # no spares: wait for the repair of what failed
    degraded = "degraded"  # no spares: restart at once on what is left, short of the failed units


class CheckpointSpec(Record):
    """What a checkpoint writes and how fast (aggregate bandwidth of the whole job to storage)."""

    state_bytes: float = Field(gt=0)  # e.g. checkpoint_state_bytes(n_params)
    write_bytes_per_s: float = Field(gt=0)
    read_bytes_per_s: float | None = Field(default=None, gt=0)  # None: the write bandwidth

    @property
    def write_s(self) -> float:
        return self.state_bytes / self.write_bytes_per_s

    @property
    def read_s(self) -> float:
        return self.state_bytes / (self.read_bytes_per_s or self.write_bytes_per_s)


class RecoverySpec(Record):
    """Restart after an interruption: R = detect_s + restart_s + reload_s (reload None: the checkpoint's
    read time), and what happens to the failed hardware (RecoveryPolicy)."""

    detect_s: float = Field(ge=0)  # failure to detection (heartbeat / collective timeout)
    restart_s: float = Field(ge=0)  # reschedule, process start, communicator initialisation
    reload_s: float | None = Field(default=None, ge=0)
    policy: RecoveryPolicy = RecoveryPolicy.spare

    def swap_restart_s(self, checkpoint: CheckpointSpec) -> float:
        reload = checkpoint.read_s if self.reload_s is None else self.reload_s
        return self.detect_s + self.restart_s + reload


class Goodput(Result):
    policy: RecoveryPolicy
    interruptions_per_h: float
    job_mtbf_s: float
    checkpoint_write_s: float  # delta
    restart_s: float  # R: detect + restart + reload on healthy hardware
    availability: float  # wait-repair: share of time the job's hardware is all up (A); else 1
    interval_s: float  # tau, compute time between checkpoints
    failure_free_s: float  # T_s
    time_to_train_s: float  # T_w = T_s / goodput_fraction
    goodput_fraction: float
    degraded_capacity_fraction: float  # mean share of the job's GPUs out (degraded policy; else 0)
    lost_per_interruption_s: float  # first order: (tau + delta) / 2 + R
    expected_interruptions: float  # while the job runs (wall time x availability)
    spare_gpus: int
    goodput_per_built_gpu: float  # goodput_fraction * job GPUs / (job + spare GPUs)


def goodput(c: JobComponents, rates: FailureRates, checkpoint: CheckpointSpec, recovery: RecoverySpec, *,
            failure_free_s: float, interval_s: float | None = None, spare_gpus: int = 0,
            other_per_gpu_h: float = 0.0, upper_tier_interrupt_fraction: float = 1.0) -> Goodput:
    """Daly's expected wall time of a job needing `failure_free_s` seconds without failures, at the
    checkpoint interval `interval_s` (default: Daly's optimum), under the recovery policy (module
    docstring). `spare_gpus` only scales goodput_per_built_gpu."""
    if not failure_free_s > 0 or math.isinf(failure_free_s):
        raise SpecError(f"failure_free_s={failure_free_s!r}: must be a finite time > 0")
    if spare_gpus < 0:
        raise SpecError(f"spare_gpus={spare_gpus}: must be >= 0")
    lam = interruption_rates(c, rates, other_per_gpu_h=other_per_gpu_h,
                             upper_tier_interrupt_fraction=upper_tier_interrupt_fraction)
    total_per_s = lam.total_per_h / SECONDS_PER_HOUR
    mtbf_s = 1.0 / total_per_s if total_per_s > 0 else math.inf
    delta = checkpoint.write_s
    r_swap = recovery.swap_restart_s(checkpoint)
    # (interruption rate per hour, MTTR h, GPUs removed) of each cause that removes GPUs; the upper
    # tiers and non-hardware causes remove none
    capacity = (
        (lam.gpu_per_h, rates.gpu.mttr_h, c.unit_gpus),
        (lam.host_per_h, rates.host.mttr_h, c.host_cut_gpus),
        (lam.nic_per_h, rates.nic.mttr_h, c.unit_gpus),
        (lam.nic_link_per_h, rates.link.mttr_h, c.unit_gpus),
        (lam.leaf_switch_per_h, rates.switch.mttr_h, c.leaf_cut_gpus),
    )
    availability = 1.0  # share of time every component that removes GPUs is up (wait-repair)
    degraded = 0.0
    if recovery.policy == RecoveryPolicy.wait_repair:
        availability = job_availability(c, rates)
    elif recovery.policy == RecoveryPolicy.degraded:
        gpus_out = sum(rate * mttr * lost for rate, mttr, lost in capacity)  # Little's law
        degraded = min(1.0, gpus_out / c.n_gpus)
    tau = daly_interval_s(delta, mtbf_s) if interval_s is None else interval_s
    if degraded >= 1.0 or availability <= 0.0:
        wall = math.inf
    else:
        wall = daly_wall_time_s(failure_free_s, tau, delta, r_swap, mtbf_s) / (availability * (1.0 - degraded))
    fraction = failure_free_s / wall
    lost = (tau + delta) / 2.0 + r_swap if not math.isinf(tau) else 0.0
    return Goodput(
        policy=recovery.policy, interruptions_per_h=lam.total_per_h, job_mtbf_s=mtbf_s,
        checkpoint_write_s=delta, restart_s=r_swap, availability=availability, interval_s=tau,
        failure_free_s=failure_free_s,
        time_to_train_s=wall, goodput_fraction=fraction, degraded_capacity_fraction=degraded,
        lost_per_interruption_s=lost, expected_interruptions=total_per_s * wall * availability, spare_gpus=spare_gpus,
        goodput_per_built_gpu=fraction * c.n_gpus / (c.n_gpus + spare_gpus),
    )


# ------------------------------------------------------------------------------------------------
# Goodput against cluster size, per family
# ------------------------------------------------------------------------------------------------


class GoodputRow(Result):
    """One (family, size) row of goodput_vs_gpus; units in the names."""

    family: Family
    n_gpus: int
    n_domains: int
    hb_domain_size: int
    switch_count: int
    link_count: int
    interruptions_per_day: float
    job_mtbf_h: float
    checkpoint_write_s: float
    interval_s: float  # Daly's optimum
    spare_domains: int  # failures.required_spares at `confidence`
    goodput_spare: float
    goodput_spare_per_built_gpu: float
    goodput_wait_repair: float
    goodput_degraded: float
    time_to_train_spare_days: float


DEFAULT_GPU_COUNTS = (16_384, 100_000, 1_000_000)
DEFAULT_FAMILIES = (Family.rail_optimized, Family.rail_only, Family.oversubscribed)


def goodput_vs_gpus(checkpoint: CheckpointSpec, recovery: RecoverySpec, *, work_gpu_h: float,
                    gpu_counts: Iterable[int] = DEFAULT_GPU_COUNTS,
                    families: Iterable[Family | str] = DEFAULT_FAMILIES, hb_domain_size: int = 8,
                    radix: int = 64, nics_per_gpu: int = 1, oversubscription: float = 3.0,
                    rates: FailureRates = FailureRates(), unit_gpus: int = 8, confidence: float = 0.999,
                    other_per_gpu_h: float = 0.0) -> tuple[GoodputRow, ...]:
    """Goodput of one job per (family, GPU count), its network from the closed form (physical
    convention; `oversubscription` for the oversubscribed family at its default boundary). A count is
    rounded up to whole HB domains. The job needs `work_gpu_h` failure-free GPU-hours, T_s = work / N
    (perfect scaling, so sizes differ by failures only). The three policies share one Daly-optimal
    interval each; `recovery.policy` is ignored (every policy is reported)."""
    if not work_gpu_h > 0 or math.isinf(work_gpu_h):
        raise SpecError(f"work_gpu_h={work_gpu_h!r}: must be a finite number > 0")
    rows = []
    for fam in families:
        family = Family(fam)
        for n in gpu_counts:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise SpecError(f"gpu_counts: {n!r} is not an integer >= 1")
            d = -(-n // hb_domain_size)
            n_gpus = d * hb_domain_size
            bom = bill_of_materials(family, n_gpus, hb_domain_size, radix, prices=RAILONLY_V5_PRICES,
                                    nics_per_gpu=nics_per_gpu,
                                    oversubscription=oversubscription if family == Family.oversubscribed else 1.0)
            comps = components_from_bom(bom, gpus_per_host=rates.gpus_per_host, unit_gpus=unit_gpus)
            spares = required_spares(family, d, hb_domain_size, radix, rates, confidence=confidence,
                                     nics_per_gpu=nics_per_gpu, unit_gpus=unit_gpus).spare_domains
            t_s = work_gpu_h * SECONDS_PER_HOUR / n_gpus
            by_policy = {
                p: goodput(comps, rates, checkpoint, recovery.model_copy(update={"policy": p}), failure_free_s=t_s,
                           spare_gpus=spares * hb_domain_size if p == RecoveryPolicy.spare else 0,
                           other_per_gpu_h=other_per_gpu_h)
                for p in RecoveryPolicy
            }
            sp = by_policy[RecoveryPolicy.spare]
            rows.append(GoodputRow(
                family=family, n_gpus=n_gpus, n_domains=d, hb_domain_size=hb_domain_size,
                switch_count=int(bom.switch_count), link_count=int(bom.link_count),
                interruptions_per_day=sp.interruptions_per_h * 24.0, job_mtbf_h=sp.job_mtbf_s / SECONDS_PER_HOUR,
                checkpoint_write_s=sp.checkpoint_write_s, interval_s=sp.interval_s, spare_domains=spares,
                goodput_spare=sp.goodput_fraction, goodput_spare_per_built_gpu=sp.goodput_per_built_gpu,
                goodput_wait_repair=by_policy[RecoveryPolicy.wait_repair].goodput_fraction,
                goodput_degraded=by_policy[RecoveryPolicy.degraded].goodput_fraction,
                time_to_train_spare_days=sp.time_to_train_s / 86_400.0,
            ))
    return tuple(rows)


__all__ = [
    "ADAM_BYTES_PER_PARAM", "CheckpointSpec", "DEFAULT_FAMILIES", "DEFAULT_GPU_COUNTS", "Goodput", "GoodputRow",
    "InterruptionRates", "JobComponents", "LLAMA3_NON_HARDWARE_PER_GPU_H", "MASTER_BYTES_PER_PARAM",
    "RecoveryPolicy", "RecoverySpec", "WEIGHT_BYTES_PER_PARAM", "checkpoint_state_bytes", "components_from_bom",
    "components_from_design", "daly_interval_s", "daly_wall_time_s", "goodput",
    "goodput_vs_gpus", "interruption_rates", "job_availability", "young_interval_s",
]
