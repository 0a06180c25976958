"""`evaluate(design, llm, training, strategy)`: the one function joining the network and perf stages.

Also the scenario file of `designer evaluate`: one model, one training run, one strategy and one
system, where the system names catalog hardware and a topology family and is built through the same
closed-form bill of materials the MILP agrees with.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from designer.errors import SpecError
from designer.network.design import NetworkDesign, design_to_system
from designer.network.prices import prices_from_components
from designer.network.topology import Family, bill_of_materials, to_network_tiers
from designer.perf.memory import gradient_bytes
from designer.perf.model import PerfCalibration, evaluate_system, perf_calibration
from designer.perf.records import Infeasible, Metrics
from designer.spec.base import Record
from designer.spec.catalog import MAX_HB_GB_PER_S, MIN_HB_GB_PER_S, Catalog, load_catalog
from designer.spec.llm import LLMSpec, Strategy, TrainingSpec
from designer.spec.load import read_yaml, validate
from designer.spec.models import load_model
from designer.spec.network_study import CatalogSource, FamilyName
from designer.spec.study import NcclEnvironment, NcclRelease
from designer.spec.system import ClusterSystem, HBDomain, HBTopology
from designer.units import GB_PER_S_TO_BYTES_PER_S, gbps_to_bytes_per_s


def evaluate(design: NetworkDesign, llm: LLMSpec, training: TrainingSpec, strategy: Strategy,
             catalog: Catalog) -> Metrics | Infeasible:
    """Score one strategy on one MILP design."""
    return evaluate_system(llm, training, strategy, design_to_system(design, catalog))


class SystemChoice(Record):
    """A cluster named by catalog ids: the HB platform, the NIC and rail width, the switch and family."""

    platform: str
    n_gpus: int = Field(ge=1, le=100_000_000)  # the bill-of-materials range (network.topology)
    family: FamilyName = "rail-optimized"
    nic: str = "cx7_400g"
    nics_per_gpu: int = Field(default=1, ge=1)
    switch: str = "qm9790"
    oversubscription: float = Field(default=1.0, ge=1.0)
    oversubscribed_level: int | None = Field(default=None, ge=1)
    # Optional overrides of the platform's scale-up fabric (e.g. to study a torus HB domain).
    hb_topology: HBTopology | None = None
    torus_dims: tuple[int, ...] | None = None
    hb_gb_per_s_per_direction: float | None = Field(default=None, ge=MIN_HB_GB_PER_S, le=MAX_HB_GB_PER_S)
    # Jobs on part of an HB domain (8, 64 or 128 GPUs of NVL72 racks): the GPUs the job uses in each
    # domain; the rest of the domain idles or runs other jobs. None means the whole domain.
    gpus_per_domain: int | None = Field(default=None, ge=1)


class Scenario(Record):
    model: str | LLMSpec = Field(description="a name in models/, a path to a model YAML, or the model inline")
    training: TrainingSpec
    strategy: Strategy
    system: SystemChoice
    catalog: CatalogSource = CatalogSource()
    # the NCCL release the run used: the collective model follows its version rules (e.g. before
    # 2.29 a network send/recv peer gets two channels); None: the shipped release
    # (designer/data/collectives.yaml nccl_version), as in a study's nccl_version
    nccl_version: NcclRelease | None = None
    # NCCL settings that differ from its defaults (buffer and chunk sizes), as in a study
    nccl_env: NcclEnvironment | None = None

    @model_validator(mode="after")
    def _torus(self) -> "Scenario":
        if self.system.torus_dims is not None and self.system.hb_topology is None:
            raise ValueError("system.torus_dims needs system.hb_topology (torus2d or torus3d)")
        return self


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file; its catalog.extra_files and model file are relative to the file's folder."""
    from designer.usercode import resolve_path

    data = read_yaml(path)
    base = Path(path).resolve().parent
    if isinstance(data, dict):
        cat = data.get("catalog")
        if isinstance(cat, dict) and isinstance(cat.get("extra_files"), list):
            data = {**data, "catalog": {**cat, "extra_files": [str(resolve_path(f, base)) if isinstance(f, str) else f
                                                               for f in cat["extra_files"]]}}
        model = data.get("model")
        if isinstance(model, str) and model.endswith((".yaml", ".yml")):
            data = {**data, "model": str(resolve_path(model, base))}
    return validate(Scenario, data, where=str(path))


def build_system(choice: SystemChoice, catalog: Catalog) -> ClusterSystem:
    """The ClusterSystem of a named cluster: platform HB domain + closed-form physical network."""
    plat = catalog.platform(choice.platform, "system.platform")
    gpu = catalog.gpu(plat.gpu)
    nic = catalog.nic(choice.nic, "system.nic")
    switch = catalog.switch(choice.switch, "system.switch")
    modes = [m for m in switch.modes if m.port_gbps == nic.gbps]
    if not modes:
        allowed = ", ".join(f"{m.port_gbps:g}G" for m in switch.modes)
        raise SpecError(f"system.switch = {choice.switch!r} has no {nic.gbps:g}G ports for nic {nic.id}; "
                        f"its port speeds: {allowed}")
    if choice.nics_per_gpu > plat.max_nics_per_gpu:
        raise SpecError(f"system.nics_per_gpu = {choice.nics_per_gpu}: platform {plat.id} takes at most "
                        f"{plat.max_nics_per_gpu} NICs per GPU (catalog max_nics_per_gpu)")
    used = choice.gpus_per_domain or plat.hb_domain_size
    if used > plat.hb_domain_size:
        raise SpecError(f"system.gpus_per_domain = {used}: at most the HB domain size {plat.hb_domain_size} "
                        f"of platform {plat.id}")
    if choice.n_gpus % used:
        hint = "" if choice.gpus_per_domain else "; set system.gpus_per_domain to use part of each domain"
        raise SpecError(f"system.n_gpus = {choice.n_gpus}: must be a multiple of the {used} GPUs used per HB "
                        f"domain of platform {plat.id}{hint}")
    prices = prices_from_components(catalog, switch.id, nic.gbps, nic_id=nic.id)
    # the scale-out network connects the GPUs in use: n_gpus / used domains of `used` GPUs each
    bom = bill_of_materials(Family(choice.family), choice.n_gpus, used, modes[0].radix,
                            prices=prices, port_gbps=nic.gbps, nics_per_gpu=choice.nics_per_gpu,
                            oversubscription=choice.oversubscription,
                            oversubscribed_level=choice.oversubscribed_level)
    tiers = tuple(t.model_copy(update={"in_network_reduction": switch.in_network_reduction})
                  for t in to_network_tiers(bom))
    hb_gb_per_s = choice.hb_gb_per_s_per_direction or plat.hb_gb_per_s_per_direction or gpu.hb_gb_per_s_per_direction
    try:
        hb = HBDomain(size=used, bandwidth_per_gpu_bytes_per_s=hb_gb_per_s * GB_PER_S_TO_BYTES_PER_S,
                      topology=choice.hb_topology or plat.hb_topology,
                      torus_dims=choice.torus_dims if choice.hb_topology else plat.torus_dims,
                      in_network_reduction=plat.in_network_reduction and (choice.hb_topology in (None, HBTopology.switched)))
    except ValueError as err:
        raise SpecError(f"system: {err.errors()[0]['msg'] if hasattr(err, 'errors') else err}") from None
    return ClusterSystem(gpu=gpu.perf(), n_gpus=choice.n_gpus, hb=hb,
                         nic_bandwidth_per_gpu_bytes_per_s=gbps_to_bytes_per_s(nic.gbps * choice.nics_per_gpu),
                         nics_per_gpu=choice.nics_per_gpu, tiers=tiers, family=choice.family)


def evaluate_scenario(scenario: Scenario) -> Metrics | Infeasible:
    catalog = load_catalog(extra_files=scenario.catalog.extra_files,
                           price_multipliers=scenario.catalog.price_multipliers)
    llm = scenario.model if isinstance(scenario.model, LLMSpec) else load_model(scenario.model)
    system = build_system(scenario.system, catalog)
    if scenario.strategy.n_gpus != system.n_gpus:
        raise SpecError(f"strategy tp*pp*dp*cp = {scenario.strategy.n_gpus} must equal system.n_gpus = {system.n_gpus}")
    return evaluate_system(llm, scenario.training, scenario_strategy(scenario), system,
                           calib=scenario_calibration(scenario))


def scenario_calibration(scenario: Scenario) -> PerfCalibration:
    """The shipped calibration at the scenario's NCCL release and settings."""
    return perf_calibration(scenario.nccl_version,
                            scenario.nccl_env.calibration_update() if scenario.nccl_env else None)


def scenario_strategy(scenario: Scenario) -> Strategy:
    """The strategy as run: with a batch tolerance or list in the training and no batch of its own,
    it runs the allowed batch nearest the target that it splits (as a search picks it)."""
    st = scenario.strategy
    if st.global_batch_sequences is not None or not scenario.training.batch_is_flexible:
        return st
    from designer.search.space import strategy_batch

    batch = strategy_batch(scenario.training, st)
    return st if batch is None else st.model_copy(update={"global_batch_sequences": batch})


def defaulted_fields(record: Record, prefix: str = "") -> list[tuple[str, Any]]:
    """Every field of a scenario the user did not set, with the value it took (nested records are
    walked; a nested record left out entirely is listed field by field)."""
    out: list[tuple[str, Any]] = []
    for name in type(record).model_fields:
        value = getattr(record, name)
        path = f"{prefix}{name}"
        if isinstance(value, Record):
            out += defaulted_fields(value, path + ".")
        elif name not in record.model_fields_set:
            out.append((path, value.value if hasattr(value, "value") else value))
    return out


def resolved_defaults(scenario: Scenario) -> list[tuple[str, Any]]:
    """defaulted_fields with the value each None default stands for in the model: expert_tp takes
    tp (1 for an MoE model with linear biases), dp_bucket_bytes Megatron-Core's bucket for the
    data-parallel group (of the dense weights), nccl_version the shipped NCCL release,
    moe_busiest_rank_load the calibrated load of a learned router (1 under forced balance), and the
    system's HB bandwidth, GPUs per domain and HB topology the platform's."""
    calib = scenario_calibration(scenario)
    st = scenario_strategy(scenario)
    llm = scenario.model if isinstance(scenario.model, LLMSpec) else load_model(scenario.model)
    system = build_system(scenario.system, load_catalog(extra_files=scenario.catalog.extra_files,
                                                        price_multipliers=scenario.catalog.price_multipliers))
    bucket_b = float(calib.dp_bucket_elements(st.dp * st.cp)) * gradient_bytes(scenario.training.grad_reduce_dtype)
    taken = {"strategy.expert_tp": llm.expert_tp_for(st.tp, st.expert_tp), "strategy.dp_bucket_bytes": bucket_b,
             "system.hb_gb_per_s_per_direction": system.hb.bandwidth_per_gpu_bytes_per_s / GB_PER_S_TO_BYTES_PER_S,
             "system.gpus_per_domain": system.hb.size,
             "system.hb_topology": system.hb.topology.value if hasattr(system.hb.topology, "value") else system.hb.topology,
             "nccl_version": calib.collectives.nccl_version,
             "strategy.global_batch_sequences": st.global_batch_sequences,
             "training.moe_busiest_rank_load": calib.compute.busiest_rank_load(scenario.training)}
    return [(k, taken[k] if v is None and k in taken else v) for k, v in defaulted_fields(scenario)]


def domain_notes(scenario: Scenario) -> dict[str, str]:
    """Per parallel group (TP, CP, EP, expert TP) whose block of ranks fits in one HB domain but that
    a domain boundary cuts, because the GPUs used per domain are not a multiple of the block (EP 16,
    32 or 64 of consecutive ranks on the 72 GPUs of an NVL72 rack): that group's traffic leaves the
    domain for the scale-out network, and the model prices the groups so. A group spread over
    domains by its stride, or larger than a domain, is what its layout asks for and is not noted.
    The note names the GPUs per domain that keep every such block inside one domain, as published
    runs on NVL72 racks use 64 of each 72, where the platform's domain allows a smaller choice."""
    import numpy as np

    from designer.perf.placement import ORDERS, place, strides
    from designer.perf.records import StrategyArrays

    llm = scenario.model if isinstance(scenario.model, LLMSpec) else load_model(scenario.model)
    catalog = load_catalog(extra_files=scenario.catalog.extra_files, price_multipliers=scenario.catalog.price_multipliers)
    system = build_system(scenario.system, catalog)
    S = StrategyArrays.from_strategies([scenario_strategy(scenario)])
    etp = np.asarray(llm.expert_tp_for(S.tp, S.etp), np.int64)
    pl = place(S.tp, S.cp, S.dp, S.pp, S.ep, system, etp=etp, order_code=S.order)
    st = strides(S.tp, S.cp, S.dp, S.pp, ORDERS[int(S.order[0])])
    # rank strides: TP and CP by the rank order; EP inside a pipeline stage over the expert TP ranks
    # (Megatron-Core's expert rank generator), expert TP innermost
    groups = (("tp", pl.tp, st["tp"]), ("cp", pl.cp, st["cp"]), ("ep", pl.ep, etp), ("expert_tp", pl.expert_tp, 1))
    hb = system.hb.size
    cut = {}
    for name, g, stride in groups:
        size, per_domain = int(g.size[0]), int(g.ranks_per_domain[0])
        block = int(np.asarray(stride).ravel()[0]) * size
        if size > 1 and block <= hb and hb % block and per_domain < size:
            cut[name] = (size, block, per_domain)
    if not cut:
        return {}
    fit = math.lcm(*(block for _, block, _ in cut.values()))
    keep = (catalog.platform(scenario.system.platform, "system.platform").hb_domain_size // fit) * fit
    hint = (f"; system.gpus_per_domain: {keep} (n_gpus a multiple of it) keeps every such group in one domain"
            if fit <= keep != hb else "")
    return {f"strategy.{name}": (f"a group of {size} over {block} consecutive ranks is cut by a boundary of the HB "
                                 f"domains of {hb} GPUs ({per_domain} on one side): its traffic crosses the scale-out "
                                 f"network{hint}")
            for name, (size, block, per_domain) in cut.items()}


def metrics_json(result: Metrics | Infeasible) -> dict[str, Any]:
    """One JSON object: the flat row, plus the documented top-level keys and the breakdown."""
    row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in result.row().items()}
    if isinstance(result, Infeasible):
        return {**row, "fits_in_memory": result.fits_in_memory}
    breakdown = {k: v for k, v in row.items() if k.endswith("_s") and k not in ("iteration_time_s", "time_to_train_s", "tokens_per_s")}
    return {**row, "breakdown": breakdown}
