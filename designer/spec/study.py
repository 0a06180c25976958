"""The full study: a model and training run, candidate networks, the strategy space, and the search.

A study file is YAML whose sections map one to one onto the records below:

    name: quickstart
    model: llama3-8b              # a name in models/, a path to a model YAML, or an inline mapping
    training: {sequence_length: 8192, global_batch_sequences: 512, total_tokens: 1.0e12}
    network: {...}                # designer.spec.network_study.NetworkStudy
    designs: [{name: ..., ...}]   # explicitly named designs (overrides of `network`)
    strategy_space: {...}
    search: {method: auto, n_trials: 200, seed: 0}
    constraints: ["mypkg.rules:max_pp"]
    objectives: [capex_usd, time_to_train_s]
    output: {dir: out/quickstart}

Only `designer.spec` is imported here; the pipeline resolves the model name and the hooks.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from designer.errors import SpecError
from designer.spec.base import Record
from designer.spec.llm import MAX_LAYERS, LLMSpec, Recompute, RecomputeModule, Schedule, TrainingSpec
from designer.spec.load import read_yaml, validate
from designer.usercode import CODE_REF_FORMS, CODE_REF_RE, local_imports, resolve_path, study_module_file
from designer.spec.costs import CostLines
from designer.spec.network_study import Budgets, CatalogSource, Choices, GpuRequirement, NetworkStudy, SolverSettings
from designer.spec.reliability import ReliabilitySettings

_NAME_RE = re.compile(r"^[A-Za-z0-9_][\w.-]*$")

ObjectiveName = Literal["capex_usd", "time_to_train_s", "power_w", "energy_j", "capex_total_usd", "facility_power_w",
                        "energy_cost_usd", "tco_usd", "usd_per_million_tokens", "time_to_train_with_failures_s"]
# Metrics that need the study's `costs` section, and the one that needs its `reliability` section.
COST_METRICS = ("capex_total_usd", "facility_power_w", "energy_cost_usd", "tco_usd", "usd_per_million_tokens")
RELIABILITY_METRICS = ("time_to_train_with_failures_s", "time_to_train_with_failures_days")
SamplerName = Literal["tpe", "nsga2", "nsga3", "random", "qmc"]
SplitKey = Literal["family", "platform"]


def _positive_unique(name: str, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not v:
        raise ValueError(f"{name}: give at least one value, or omit the key for every valid value")
    if any(x < 1 for x in v):
        raise ValueError(f"{name} = {list(v)}: every value must be >= 1")
    return tuple(sorted(set(v)))


class StrategySpace(Record):
    """The values the search may try, per dimension. `None` (the key omitted) means every value that
    is valid for the model and the design (see designer.search.space for the rules). DP is derived:
    dp = n_gpus / (tp * pp * cp)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] = (1,)
    ep: tuple[int, ...] | None = None
    sequence_parallel: tuple[bool, ...] = (False, True)
    microbatch_sizes: tuple[int, ...] = (1, 2, 4)
    schedules: tuple[Schedule, ...] = (Schedule.one_f_one_b, Schedule.interleaved)
    # Model chunks per GPU tried with the interleaved schedule (1F1B and GPipe always use 1).
    virtual_stages: tuple[int, ...] = (2, 4)
    zero_stages: tuple[int, ...] = (1,)
    zeropp_quantized_weights: tuple[bool, ...] = (False,)
    zeropp_quantized_gradients: tuple[bool, ...] = (False,)
    zeropp_hierarchical_partition: tuple[bool, ...] = (False,)
    recompute: tuple[Recompute, ...] = (Recompute.none, Recompute.selective, Recompute.full)
    # Under selective recompute, which modules each try drops and recomputes (Megatron-LM's
    # --recompute-modules; [] is its default, core_attn). E.g. [[], [layernorm, mla_up_proj, moe_act]]
    # also tries DeepSeek-V3's recipe (its report §3.2.3 and §3.3.3). Modules the model lacks (moe and
    # moe_act on a dense model, mla_up_proj without MLA) are dropped from a try; tries left alike merge.
    recompute_modules: tuple[tuple[RecomputeModule, ...], ...] = ((),)
    overlap_dp_comm: tuple[bool, ...] = (True,)
    overlap_tp_comm: tuple[bool, ...] = (False,)
    # optimizer states in host memory (ZeRO-Offload): lets designs short of HBM train, slower
    offload_optimizer: tuple[bool, ...] = (False,)
    # 16-bit weights and gradients in host memory too (FSDP2 CPUOffloadPolicy; needs ZeRO stage 3)
    offload_weights: tuple[bool, ...] = (False,)
    # layers per stage whose activations go to host memory (Megatron --cpu-offloading-num-layers)
    offload_activation_layers: tuple[int, ...] = (0,)
    # context-parallel attention: ring (p2p), all-gathered K,V, or Ulysses all-to-all (a2a)
    cp_comm: tuple[Literal["p2p", "all_gather", "a2a"], ...] = ("p2p",)
    # MoE: hide the all-to-alls behind another microbatch (Megatron-Core's 1F1B A2A overlap, where it
    # runs: designer.perf.iteration.feasibility_codes), and the dispatcher: Megatron-Core's default
    # all-to-all or the node-deduplicating DeepEP (its flex dispatcher). A dense model, which has
    # neither, takes the first of each.
    overlap_ep_comm: tuple[bool, ...] = (False, True)
    moe_dispatcher: tuple[Literal["alltoall", "allgather", "deepep"], ...] = ("alltoall", "deepep")
    # the iteration captured in CUDA graphs (a smaller host floor per collective)
    cuda_graphs: tuple[bool, ...] = (False,)
    # How layers split over pipeline stages: Megatron's own split (even, or its uneven form when pp
    # does not divide the layers), and/or the end stages sized to balance the work with the output
    # layer, loss and MTP modules on the last stage (designer.perf.iteration.balanced_end_stages),
    # tried where it differs from Megatron's; the launch then states the end stages' layer counts.
    pipeline_split: tuple[Literal["megatron", "balanced"], ...] = ("megatron", "balanced")
    # Widest TP group in HB domains: 1 keeps every TP group inside one NVLink domain; n > 1 also tries
    # tp = m x domain size for m <= n (when `tp` is omitted) and accepts such values when listed. Its
    # all-reduces then cross the network (hierarchically, on the same rails), so it pays off only where
    # memory forces wide TP; Megatron-LM supports it, Calculon's search includes it.
    max_tp_hb_domains: int = Field(default=1, ge=1)
    # Largest pipeline depth tried when `pp` is omitted (every depth up to it and the layer count).
    max_pp: int = Field(default=64, ge=1, le=MAX_LAYERS)

    @field_validator("tp", "pp", "ep")
    @classmethod
    def _opt_ints(cls, v, info):  # noqa: ANN001 - pydantic signature
        return _positive_unique(info.field_name, v)

    @field_validator("cp", "microbatch_sizes")
    @classmethod
    def _ints(cls, v, info):  # noqa: ANN001
        return _positive_unique(info.field_name, v)

    @field_validator("offload_activation_layers")
    @classmethod
    def _offload_layers(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(x < 0 for x in v):
            raise ValueError(f"offload_activation_layers = {list(v)}: give layer counts >= 0")
        return tuple(sorted(set(v)))

    @field_validator("virtual_stages")
    @classmethod
    def _vs(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(x < 2 for x in v):
            raise ValueError(f"virtual_stages = {list(v)}: interleaving needs values >= 2")
        return tuple(sorted(set(v)))

    @field_validator("zero_stages")
    @classmethod
    def _zero(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or any(x not in (0, 1, 2, 3) for x in v):
            raise ValueError(f"zero_stages = {list(v)}: allowed values are 0, 1, 2, 3")
        return tuple(sorted(set(v)))

    @field_validator("sequence_parallel", "zeropp_quantized_weights", "zeropp_quantized_gradients",
                     "zeropp_hierarchical_partition", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer",
                     "offload_weights", "overlap_ep_comm", "cuda_graphs")
    @classmethod
    def _bools(cls, v: tuple[bool, ...], info) -> tuple[bool, ...]:  # noqa: ANN001
        if not v:
            raise ValueError(f"{info.field_name}: give at least one of true, false")
        return tuple(sorted(set(v)))

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _lists_of_lists(cls, v):  # noqa: ANN001, ANN206
        # one flat list ([layernorm, moe_act]) is one try written without its brackets
        if isinstance(v, (list, tuple)) and v and all(isinstance(m, str) for m in v):
            raise ValueError(f"recompute_modules = {list(v)}: must be a list of module lists, one per try, "
                             f"e.g. [{list(v)}] ([] is Megatron's default, core_attn)")
        return v

    @field_validator("recompute_modules")
    @classmethod
    def _module_lists(cls, v: tuple[tuple[RecomputeModule, ...], ...]) -> tuple[tuple[RecomputeModule, ...], ...]:
        if not v:
            raise ValueError("recompute_modules: give at least one list of modules ([] is core_attn)")
        out = []
        for modules in v:
            modules = tuple(dict.fromkeys(modules))
            if RecomputeModule.alternate_matmuls in modules and len(modules) > 1:
                raise ValueError(f"recompute_modules = {[m.value for m in modules]}: alternate_matmuls is a "
                                 "whole-layer policy: it must be listed alone")
            out.append(modules)
        return tuple(dict.fromkeys(out))

    @field_validator("schedules", "recompute", "cp_comm", "moe_dispatcher", "pipeline_split")
    @classmethod
    def _enums(cls, v, info):  # noqa: ANN001
        if not v:
            raise ValueError(f"{info.field_name}: give at least one value")
        return tuple(dict.fromkeys(v))


class SearchSettings(Record):
    """How each design's strategy space is searched.

    method: `exhaustive` scores every valid strategy with the vectorized model; `optuna` runs
    `n_trials` trials of `sampler` per design; `auto` enumerates a design's space when it holds at most
    `auto_max_exhaustive` strategies. Measured (studies/benchmarks/bench_evaluate.py and
    search_quality.py, 2 cores): the vectorized model scores ~3e5 strategies/s, 10M in about 35 s with
    the scored table bounded to its million fastest rows, while an Optuna trial costs ~20-50 ms: 10M
    strategies enumerate in the time of ~1,000 trials, which find a worse best."""

    method: Literal["optuna", "exhaustive", "auto"] = "auto"
    n_trials: int = Field(default=200, ge=1, description="Optuna trials per design")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Optuna's and numpy's seeds are 32-bit")
    sampler: SamplerName = "tpe"
    population_size: int = Field(default=32, ge=2, description="NSGA-II/III population")
    auto_max_exhaustive: int = Field(default=10_000_000, ge=0)


class Candidates(Record):
    """How candidate designs are generated.

    mode `codesign` (the default): every combination of the network section's choices (platform, NIC
    and NICs per GPU, switch and port mode, family and oversubscription ratio) at every GPU count the
    range or frontier levels allow is one cluster design; the MILP prices each, the strategy search
    times it, and `design_search` says how that outer space is searched. Training time thus chooses
    the network as much as cost does.

    mode `cheapest`: the MILP alone picks the cheapest network per (family, platform) split
    (`split_by`) at each frontier level. A frontier that varies capex or power (max_gpus, max_flops)
    always runs this way, with every GPU count the MILP returns checked for a valid strategy."""

    mode: Literal["codesign", "cheapest"] = "codesign"
    split_by: tuple[SplitKey, ...] = ("family", "platform")


OuterSampler = Literal["tpe", "nsga2", "random"]


class DesignSearch(Record):
    """How the outer space of cluster designs is searched (co-design mode).

    method: `exhaustive` prices and times every design; `optuna` runs `n_trials` trials of one
    multi-objective study whose trials are cluster designs (capex, time to train and the study's other
    objectives; budgets, the goal's limits and the trial constraints through trial.set_constraint);
    `auto` enumerates when the space holds at most `auto_max_exhaustive` designs. The seed is
    `search.seed`. Measured sampler choice: studies/benchmarks/codesign.py."""

    method: Literal["auto", "exhaustive", "optuna"] = "auto"
    n_trials: int = Field(default=200, ge=1, description="outer Optuna trials (cluster designs)")
    sampler: OuterSampler = "tpe"
    auto_max_exhaustive: int = Field(default=5000, ge=0)


GoalMetric = Literal["capex_usd", "time_to_train_s", "time_to_train_days", "power_w", "energy_j", "energy_mwh",
                     "capex_total_usd", "facility_power_w", "energy_cost_usd", "tco_usd", "usd_per_million_tokens",
                     "time_to_train_with_failures_s", "time_to_train_with_failures_days"]
GOAL_METRICS: tuple[str, ...] = typing.get_args(GoalMetric)
_LIMIT_RE = re.compile(r"^\s*(<=|>=)\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*$")


class GoalLimit(Record):
    metric: GoalMetric
    sense: Literal["<=", ">="]
    rhs: float

    @property
    def text(self) -> str:
        return f"{self.metric} {self.sense} {self.rhs:g}"


class Goal(Record):
    """What the study answers. `front` (the default): the Pareto front of capex vs time to train.
    `{minimize: capex_usd, subject_to: {time_to_train_days: "<= 60"}}`: the cheapest design that meets
    a deadline; `{minimize: time_to_train_s, subject_to: {capex_usd: "<= 3e8", power_w: "<= 2.5e7"}}`:
    the fastest under budgets. The front is always written too."""

    minimize: GoalMetric | None = None
    subject_to: tuple[GoalLimit, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data):  # noqa: ANN001 - pydantic signature
        if data == "front" or data is None:
            return {}
        if isinstance(data, str):
            raise ValueError(f"goal = '{data}': allowed: front, or {{minimize: METRIC, subject_to: {{METRIC: '<= VALUE'}}}}")
        if isinstance(data, dict) and isinstance(data.get("subject_to"), dict):
            limits = []
            for k, v in data["subject_to"].items():
                if k not in GOAL_METRICS:
                    near = difflib.get_close_matches(str(k), GOAL_METRICS, n=1)
                    raise ValueError(f"goal.subject_to.{k}: not a metric a goal can limit"
                                     + (f" (did you mean '{near[0]}'?)" if near else "")
                                     + f"; allowed: {', '.join(GOAL_METRICS)}")
                m = _LIMIT_RE.match(str(v)) if isinstance(v, str) else None
                if m is None:
                    raise ValueError(f"goal.subject_to.{k} = {v!r}: write a limit as '<= VALUE' or '>= VALUE'")
                limits.append({"metric": k, "sense": m.group(1), "rhs": float(m.group(2))})
            data = {**data, "subject_to": limits}
        return data

    @model_validator(mode="after")
    def _needs_minimize(self) -> "Goal":
        if self.subject_to and self.minimize is None:
            raise ValueError("goal.subject_to needs goal.minimize (the metric to optimize under the limits)")
        for lim in self.subject_to:
            if not math.isfinite(lim.rhs):
                raise ValueError(f"goal.subject_to.{lim.metric} = {lim.rhs}: give a finite limit")
            if lim.sense == "<=" and lim.rhs <= 0:
                # every metric a goal limits (cost, time, power, energy) is positive
                raise ValueError(f"goal.subject_to.{lim.metric} = '<= {lim.rhs:g}': no design can meet it; the limit "
                                 "must be > 0")
            if lim.sense == ">=" and lim.rhs <= 0:
                # ... so a lower limit at or below 0 holds for every design: a slip, not a limit
                raise ValueError(f"goal.subject_to.{lim.metric} = '>= {lim.rhs:g}': every design meets it; the limit "
                                 "must be > 0")
        return self

    @property
    def is_front(self) -> bool:
        return self.minimize is None


class NamedDesign(Record):
    """A design given by name: the study's `network` section with these fields replaced (or, without a
    `network` section, a complete network study). The MILP sizes it at min cost."""

    name: str
    choices: Choices | None = None
    gpus: GpuRequirement | None = None
    budgets: Budgets | None = None
    hooks: tuple[str, ...] | None = None
    catalog: CatalogSource | None = None
    solver: SolverSettings | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' must be letters, digits, '_', '-' or '.'")
        return v

    def resolve(self, base: NetworkStudy | None, base_dir: str | None = None) -> NetworkStudy:
        changes = {k: getattr(self, k) for k in ("choices", "gpus", "budgets", "hooks", "catalog", "solver")
                   if getattr(self, k) is not None}
        if base is None:
            missing = [k for k in ("choices", "gpus") if k not in changes]
            if missing:
                raise SpecError(f"field 'designs.{self.name}.{missing[0]}' is required when the study has no 'network' section")
            data = {"name": self.name, "base_dir": base_dir,
                    **{k: v.model_dump() if isinstance(v, Record) else v for k, v in changes.items()}}
            return validate(NetworkStudy, data, where=f"designs.{self.name}")
        # A named design is one design: the MILP finds its cheapest bill of materials.
        try:
            return base.with_updates(name=self.name, objective={"kind": "min_cost"}, **changes)
        except Exception as err:  # pydantic ValidationError from the merged record
            raise SpecError(f"designs.{self.name}: {str(err).splitlines()[0]}") from None


class OutputSettings(Record):
    dir: str | None = Field(default=None, description="None means out/<study name>")
    # Optuna storage URL. None: a JournalStorage file `optuna.journal` in the output folder.
    storage: str | None = None
    # A design column (e.g. family) to draw and export one front per value, besides the overall front.
    front_by: str | None = None
    plots: bool = True
    # strategies/<design id>.<format>: every inner strategy of the front's designs, or of every design
    strategies: Literal["front", "all"] = "front"
    # Formats of the large tables (trials, strategies/); the front is always CSV and Parquet.
    formats: tuple[Literal["parquet", "csv"], ...] = Field(default=("parquet",), min_length=1)
    # Near-ties kept off the front: per objective, a relative tolerance (0.01: 1%). A point is left out
    # when another is worse by at most these fractions in every objective (epsilon-dominance). Empty:
    # the exact front (the default); trials always holds every design.
    front_tolerance: dict[ObjectiveName, float] = Field(default_factory=dict)

    @field_validator("front_tolerance")
    @classmethod
    def _tolerance(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if not 0 <= x < 1:
                raise ValueError(f"front_tolerance.{k} = {x}: allowed: a fraction in [0, 1), e.g. 0.01 for 1%")
        return v


class RobustnessSettings(Record):
    """Price uncertainty: `samples` joint draws of every catalog price that carries a range
    (price_low_usd, price_high_usd; triangular about the point price unless the entry says uniform),
    from numpy's Generator(PCG64(seed)). For each candidate design: the probability that it stays on
    the front and that it is the goal's answer, and its capex quantiles. Candidates: the best design of
    every (family, platform) split, the front's designs among them (designer.analysis.robustness)."""

    samples: int = Field(default=1000, ge=10, le=1_000_000)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)


def _nccl_release(v: object) -> object:
    """An NCCL release as 'major.minor' (a patch release, '2.21.5', keeps its minor's tuning rules).
    A YAML number is refused: 2.20 reads as 2.2."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        raise ValueError(f"write the NCCL release in quotes, e.g. \"2.27\" (the number {v} loses trailing zeros)")
    if isinstance(v, str):
        m = re.fullmatch(r"(2\.\d+)(\.\d+)?", v.strip())
        if m is None:
            raise ValueError("an NCCL release is 'major.minor' (or 'major.minor.patch') from 2.x, e.g. \"2.27\"")
        return m.group(1)
    return v


# the NCCL release a study or scenario models; designer/data/collectives.yaml holds its version rules
NcclRelease = Annotated[str, BeforeValidator(_nccl_release)]


class NcclEnvironment(Record):
    """NCCL settings the cluster's jobs run with, where they differ from NCCL's defaults (a network
    plugin may set them: aws-ofi-nccl sets all three on p5 and later). They size NCCL's chunks, and
    with them the pipeline fill of mid-size collectives (designer.perf.collectives)."""

    buffsize_bytes: int | None = Field(default=None, ge=65536, description="NCCL_BUFFSIZE (default 4 MiB)")
    nvls_chunksize_bytes: int | None = Field(default=None, ge=4096, description="NCCL_NVLS_CHUNKSIZE (default 128 KiB)")
    nvlstree_max_chunksize_bytes: int | None = Field(default=None, ge=4096, description=(
        "NCCL_NVLSTREE_MAX_CHUNKSIZE (default: 64 KiB from 4 nodes, else the NVLS chunk)"))
    ib_qps_per_connection: int | None = Field(default=None, ge=1, le=128, description=(
        "NCCL_IB_QPS_PER_CONNECTION (default 1); 2 or more, with adaptive routing for every message "
        "(NCCL_IB_AR_THRESHOLD=0), raises the share of the NICs' line rate NCCL reaches"))

    def calibration_update(self) -> dict[str, float | int]:
        """The CollectiveCalibration fields these settings replace."""
        pairs = (("buffer_bytes", self.buffsize_bytes), ("nvls_chunk_bytes", self.nvls_chunksize_bytes),
                 ("nvls_tree_max_chunk_bytes", self.nvlstree_max_chunksize_bytes))
        out: dict[str, float | int] = {k: float(v) for k, v in pairs if v is not None}
        if self.ib_qps_per_connection is not None:
            out["ib_qps_per_connection"] = self.ib_qps_per_connection
        return out


class StudySpec(Record):
    name: str
    model: str | LLMSpec
    training: TrainingSpec
    network: NetworkStudy | None = None
    designs: tuple[NamedDesign, ...] = ()
    candidates: Candidates = Candidates()
    design_search: DesignSearch = DesignSearch()
    goal: Goal = Goal()
    strategy_space: StrategySpace = StrategySpace()
    search: SearchSettings = SearchSettings()
    constraints: tuple[str, ...] = ()
    objectives: tuple[ObjectiveName, ...] = ("capex_usd", "time_to_train_s")
    output: OutputSettings = OutputSettings()
    # Cost lines beyond compute and the back-end fabric (storage, front-end network, facility, PUE,
    # electricity, depreciation; designer.spec.costs): None reports IT capex and IT power only.
    costs: CostLines | None = None
    # Failures, checkpoints and restarts (designer.spec.reliability): None assumes no failures.
    reliability: ReliabilitySettings | None = None
    # Price uncertainty of the front (catalog price ranges sampled jointly): None skips it.
    robustness: RobustnessSettings | None = None
    # the NCCL release the collective model follows (its version rules; designer/data/collectives.yaml)
    nccl_version: NcclRelease | None = None
    # NCCL settings that differ from its defaults (buffer and chunk sizes; None: NCCL's defaults)
    nccl_env: NcclEnvironment | None = None
    # The study file's folder (set by load_study; None: the current folder): relative paths in the
    # study (model file, catalog.extra_files, hooks, constraints, output.dir, output.storage) are
    # resolved against it. Not part of the study's identity (spec_hash), so a moved project continues.
    base_dir: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' must be letters, digits, '_', '-' or '.'")
        return v

    @field_validator("constraints")
    @classmethod
    def _hooks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for h in v:
            if not CODE_REF_RE.match(h):
                raise ValueError(f"'{h}' must look like {CODE_REF_FORMS}")
        return v

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"{list(v)}: an objective is listed twice")
        if "capex_usd" not in v and "capex_total_usd" not in v and "tco_usd" not in v:
            raise ValueError(f"{list(v)}: must include a cost (capex_usd, capex_total_usd or tco_usd)")
        if "time_to_train_s" not in v and "time_to_train_with_failures_s" not in v:
            raise ValueError(f"{list(v)}: must include time_to_train_s or time_to_train_with_failures_s")
        return v

    @model_validator(mode="after")
    def _sections_for_metrics(self) -> "StudySpec":
        named = [("objectives", o) for o in self.objectives] + \
            [("goal.minimize", self.goal.minimize)] + [("goal.subject_to", lim.metric) for lim in self.goal.subject_to]
        for where, m in named:
            if m in COST_METRICS and self.costs is None:
                raise ValueError(f"{where}: {m} needs a 'costs' section (e.g. costs: {{facility: {{}}, electricity: {{}}}})")
            if m in RELIABILITY_METRICS and self.reliability is None:
                raise ValueError(f"{where}: {m} needs a 'reliability' section (e.g. reliability: "
                                 "{checkpoint_write_gb_per_s: 2000})")
        nets = [("network", self.network)] if self.network is not None else []
        nets += [(f"designs.{d.name}", d) for d in self.designs if d.budgets is not None]
        for where, n in nets:
            for m in ("capex_total_usd", "facility_power_w"):
                if getattr(n.budgets, m) is not None and self.costs is None:
                    raise ValueError(f"{where}.budgets.{m}: needs a 'costs' section (e.g. costs: {{facility: {{}}}}); "
                                     "budgets.capex_usd and budgets.power_w bound IT capex and IT load")
        if self.reliability is not None and self.reliability.checkpoint_write_gb_per_s is None:
            storage = None if self.costs is None else self.costs.storage
            if storage is None or (storage.write_gb_per_s is None and storage.write_gb_per_s_per_pb is None):
                raise ValueError("reliability.checkpoint_write_gb_per_s: give the job's checkpoint write bandwidth, "
                                 "or costs.storage.write_gb_per_s (or write_gb_per_s_per_pb with pb_per_1000_gpus)")
        return self

    @model_validator(mode="after")
    def _tolerance_objectives(self) -> "StudySpec":
        extra = sorted(set(self.output.front_tolerance) - set(self.objectives))
        if extra:
            raise ValueError(f"output.front_tolerance names {extra}, which are not objectives of the study; "
                             f"allowed: {list(self.objectives)}")
        return self

    @model_validator(mode="after")
    def _designs(self) -> "StudySpec":
        if self.network is None and not self.designs:
            raise ValueError("give a 'network' section, named 'designs', or both")
        names = [d.name for d in self.designs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"design name(s) {sorted(dup)} used twice")
        return self

    @property
    def codesign(self) -> bool:
        """Whether the study runs the co-design search (see Candidates)."""
        if self.network is None or self.candidates.mode != "codesign":
            return False
        fr = self.network.objective.frontier
        return self.network.objective.base_kind == "min_cost" and (fr is None or fr.vary == "n_gpus")

    @property
    def out_dir(self) -> Path:
        """output.dir, relative to the study file's folder; without it out/<name> in the current folder."""
        return resolve_path(self.output.dir, self.base_dir) if self.output.dir else Path("out") / self.name

    def file_digests(self) -> dict[str, str]:
        """sha256 of each file the study names whose content decides its results, keyed as the study
        writes it: the model file, the trial constraints' and hooks' `.py` files or modules of the
        study's folder with the modules of that folder they import (`code:REF imports PATH`), the
        catalogs' extra files. Part of the identity, so that an edited file is a new spec
        (its results move the earlier ones aside, and an Optuna storage is not continued with them)."""
        files: dict[str, Path] = {}
        # a model file the study names (a shipped model, named, is part of designer's release)
        if isinstance(self.model, str) and self.model.endswith((".yaml", ".yml")):
            files[f"model:{self.model}"] = resolve_path(self.model, self.base_dir)
        refs = list(self.constraints)
        catalogs = []
        if self.network is not None:
            refs += list(self.network.hooks)
            catalogs.append(self.network.catalog)
        for d in self.designs:
            refs += list(d.hooks or ())
            catalogs.append(d.catalog)
        for ref in refs:
            target = ref.rsplit(":", 1)[0]
            if target.endswith(".py"):
                files[f"code:{target}"] = resolve_path(target, self.base_dir)
            elif (module := study_module_file(target, self.base_dir)) is not None:
                files[f"code:{target}"] = module  # a module of the study's folder (not an installed one)
            else:
                continue
            for rel, path in local_imports(target, self.base_dir).items():
                files[f"code:{target} imports {rel}"] = path
        for cat in catalogs:
            for f in getattr(cat, "extra_files", None) or ():
                files[f"catalog:{f}"] = resolve_path(str(f), self.base_dir)
        return {k: hashlib.sha256(p.read_bytes()).hexdigest() for k, p in sorted(files.items()) if p.is_file()}

    def identity_data(self) -> dict:
        """The spec as JSON data without where it was read from (base_dir), with the content of the
        files it names (file_digests)."""
        data = self.model_dump(mode="json")
        digests = self.file_digests()
        if digests:
            data["file_digests"] = digests
        data.pop("base_dir", None)
        if data.get("nccl_env") is None:  # studies written before the field keep their identity
            data.pop("nccl_env", None)
        if isinstance(data.get("training"), dict) and not data["training"].get("fp8_attention"):
            data["training"].pop("fp8_attention", None)  # likewise
        if isinstance(data.get("training"), dict) and data["training"].get("attention_output_saved") is None:
            data["training"].pop("attention_output_saved", None)  # likewise
        if isinstance(data.get("model"), dict):  # likewise, for a model written in the study
            if data["model"].get("activation_clamp") is None:
                data["model"].pop("activation_clamp", None)
            for flag in ("qk_norm", "qkv_bias"):
                if not data["model"].get(flag):
                    data["model"].pop(flag, None)
            if data["model"].get("nope_layer_interval") is None:
                data["model"].pop("nope_layer_interval", None)
            if isinstance(data["model"].get("moe"), dict) and not data["model"]["moe"].get("shared_expert_gate"):
                data["model"]["moe"].pop("shared_expert_gate", None)
        if isinstance(data.get("network"), dict):
            data["network"].pop("base_dir", None)
        return data

    def spec_hash(self) -> str:
        """Stable over key order and formatting: sha256 of the canonical JSON of the validated spec."""
        blob = json.dumps(self.identity_data(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def with_updates(self, **changes: object) -> "StudySpec":
        data = self.model_dump()
        for k, v in changes.items():
            data[k] = v.model_dump() if isinstance(v, Record) else v
        return validate(StudySpec, data, where="study")


def load_study(path: str | Path) -> StudySpec:
    """Validate a study YAML file. Relative paths in it are resolved against its folder (base_dir)."""
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise SpecError(f"{p}: a study file must be a mapping with keys name, model, training, ...")
    base = str(p.resolve().parent)
    data = {**data, "base_dir": base}
    if isinstance(data.get("network"), dict):
        data["network"] = {**data["network"], "base_dir": base}
    return validate(StudySpec, data, where=str(p))


__all__ = [
    "Candidates", "DesignSearch", "Goal", "GoalLimit", "NamedDesign", "ObjectiveName", "OutputSettings", "SearchSettings", "StrategySpace",
    "StudySpec", "load_study",
]
