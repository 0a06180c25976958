"""The space of valid parallelization strategies for one design.

A strategy is valid when Megatron-LM (and DeepSpeed for ZeRO-2/3 and ZeRO++) can run it:

- tp * pp * dp * cp = n_gpus (dp is derived);
- tp divides the HB (scale-up) domain size, so a TP group stays in its NVLink domain, or, where the
  study allows it (StrategySpace.max_tp_hb_domains), tp is a multiple of the domain size: the group
  spans whole domains on the same local ranks and its collectives are hierarchical (in-domain phase,
  then a same-rail phase over the network; Megatron-LM runs TP across nodes, and Calculon's search
  tries it); tp divides the attention heads, the hidden size and the FFN sizes (dense and expert); tp and the key/value
  heads divide one another (query groups are split across TP ranks, or replicated when tp > kv heads);
- pp stages of at least one layer each: pp need not divide the layer count; uneven stages follow
  Megatron's first/last-stage form (designer.spec.llm.pipeline_stage_layers; the slowest stage paces
  the pipeline), so 126 layers run on pp 16 and 61 on any pp up to 61; the interleaved
  schedule needs pp >= 2, pp * virtual_stages <= layers (chunks may be uneven too), and a microbatch
  count divisible by pp (Megatron's interleaved schedule); DualPipe an even pp and an even
  microbatch count >= 2 x pp (DualPipe.step's own check);
- context parallelism splits each sequence into 2 * cp chunks (load-balanced causal attention), so the
  sequence length is a multiple of 2 * cp;
- expert parallelism only for MoE models: ep divides the expert count and dp * cp (experts are
  sharded across the data-and-context-parallel ranks);
- the global batch is a multiple of dp * microbatch size;
- sequence parallelism only with tp > 1;
- ZeRO++ (qwZ, qgZ, hpZ) only with ZeRO-3 (ZeRO-2/3 and FSDP combine with pipelines, as in
  torchtitan and Megatron-FSDP).

The space is a grid: "layouts" (tp, pp, dp, cp, ep) times a grid of the remaining ("free")
dimensions. No rule couples the free dimensions across a few blocks of them (_BLOCKS), so a layout's
valid free rows are a product of each block's valid rows: small to hold even when the full table of
strategies is not, so sizes, choices and the nearest valid strategy are computed without materializing
it, and enumerating costs what it yields rather than a pass over the full grid per layout.

Built spaces are memoized (a bounded LRU, DESIGN_SPACE_CACHE_SIZE, the module's only state): every
caller that asks for one design's space gets the same immutable object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Iterator

import numpy as np

from designer.errors import SpecError
from designer.perf.iteration import REASONS, balanced_end_stages
from designer.perf.records import RECOMPUTE_MODULE_BITS, recompute_module_label, recompute_module_mask
from designer.spec.llm import LLMSpec, Recompute, RecomputeModule, Schedule, Strategy, TrainingSpec
from designer.spec.study import StrategySpace

# Integer codes used in the columnar table; the order is fixed (it is part of the table's meaning).
SCHEDULES: tuple[Schedule, ...] = (Schedule.gpipe, Schedule.one_f_one_b, Schedule.interleaved,
                                   Schedule.zero_bubble, Schedule.dualpipe)
RECOMPUTES: tuple[Recompute, ...] = (Recompute.none, Recompute.selective, Recompute.full)
_INTERLEAVED = SCHEDULES.index(Schedule.interleaved)
_DEFAULT_MODULES = recompute_module_mask(())  # Megatron's default module list, core_attn
_DUALPIPE = SCHEDULES.index(Schedule.dualpipe)

# Column order of a StrategyTable (= the fields of designer.spec.llm.Strategy).
COLUMNS: tuple[str, ...] = (
    "tp", "pp", "dp", "ep", "cp", "sequence_parallel", "microbatch_size", "schedule", "virtual_stages",
    "zero_stage", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
    "recompute", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights",
    "offload_activation_layers", "cp_comm", "overlap_ep_comm", "moe_dispatcher", "cuda_graphs",
    "global_batch_sequences", "pp_first_stage_layers", "pp_last_stage_layers", "recompute_modules",
)
# Columns holding an index into a tuple of option names (like schedule and recompute).
CODED: dict[str, tuple[str, ...]] = {"cp_comm": ("p2p", "all_gather", "a2a"), "moe_dispatcher": ("alltoall", "allgather", "deepep")}
LAYOUT_DIMS: tuple[str, ...] = ("tp", "pp", "cp", "ep")
# The free grid's dimensions; "schedule" is a (schedule, virtual stages) option; "pipeline_split"
# (PIPELINE_SPLITS) is written as the end stages' layer counts, -1 for Megatron's own split;
# "recompute_modules" holds a bitmask of selective recompute's modules (perf.records.recompute_module_mask;
# a row that is not selective holds that of Megatron's default, core_attn).
PIPELINE_SPLITS: tuple[str, ...] = ("megatron", "balanced")
FREE_DIMS: tuple[str, ...] = (
    "sequence_parallel", "microbatch_size", "schedule", "pipeline_split", "zero_stage", "zeropp_quantized_weights",
    "zeropp_quantized_gradients", "zeropp_hierarchical_partition", "recompute", "recompute_modules",
    "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights", "offload_activation_layers",
    "cp_comm", "overlap_ep_comm", "moe_dispatcher", "cuda_graphs",
)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def schedule_label(schedule: Schedule, virtual_stages: int) -> str:
    return f"interleaved:{virtual_stages}" if schedule == Schedule.interleaved else schedule.value


def strategy_key(s: Strategy) -> tuple:
    """A hashable identity of a strategy, in COLUMNS order, with enums as their codes."""
    return (s.tp, s.pp, s.dp, s.ep, s.cp, bool(s.sequence_parallel), s.microbatch_size, SCHEDULES.index(s.schedule),
            s.virtual_stages, s.zero_stage, bool(s.zeropp_quantized_weights), bool(s.zeropp_quantized_gradients),
            bool(s.zeropp_hierarchical_partition), RECOMPUTES.index(s.recompute), bool(s.overlap_dp_comm),
            bool(s.overlap_tp_comm), bool(s.offload_optimizer), bool(s.offload_weights), s.offload_activation_layers,
            CODED["cp_comm"].index(s.cp_comm), bool(s.overlap_ep_comm), CODED["moe_dispatcher"].index(s.moe_dispatcher),
            bool(s.cuda_graphs), s.global_batch_sequences or 0,
            -1 if s.pp_first_stage_layers is None else s.pp_first_stage_layers,
            -1 if s.pp_last_stage_layers is None else s.pp_last_stage_layers,
            recompute_module_mask(s.recompute_modules))


def strategy_from_key(key: tuple) -> Strategy:
    d = dict(zip(COLUMNS, key))
    d["schedule"] = SCHEDULES[int(d["schedule"])]
    d["recompute"] = RECOMPUTES[int(d["recompute"])]
    for c, names in CODED.items():
        d[c] = names[int(d[c])]
    d["global_batch_sequences"] = int(d["global_batch_sequences"]) or None
    for c in ("pp_first_stage_layers", "pp_last_stage_layers"):
        d[c] = None if int(d[c]) < 0 else int(d[c])
    selective = d["recompute"] == Recompute.selective
    d["recompute_modules"] = recompute_modules_of(int(d["recompute_modules"])) if selective else ()
    return Strategy(**{k: (v.item() if isinstance(v, np.generic) else v) for k, v in d.items()})


def tp_fits_hb(tp: int, hb_domain_size: int, max_tp_hb_domains: int) -> bool:
    """A TP group inside one HB domain (tp divides it), or over whole domains on the same local
    ranks (tp a multiple of it, at most `max_tp_hb_domains` domains)."""
    if hb_domain_size % tp == 0:
        return True
    return tp % hb_domain_size == 0 and tp // hb_domain_size <= max_tp_hb_domains


def tp_candidates(space: StrategySpace, hb_domain_size: int) -> list[int]:
    """The study's tp list, or when omitted every divisor of the domain size and the multiples of it
    up to `max_tp_hb_domains` domains."""
    if space.tp:
        return list(space.tp)
    return list(divisors(hb_domain_size)) + [hb_domain_size * m for m in range(2, space.max_tp_hb_domains + 1)]


# TrainingSpec.optimizer muon: Newton-Schulz runs on whole matrices, on the GPU (the evaluator's reason 30)
MUON_RULE = REASONS[30][1]


def invalid_reason(s: Strategy, llm: LLMSpec, training: TrainingSpec, n_gpus: int, hb_domain_size: int) -> str | None:
    """Why one strategy cannot run on a design (None when it can). The scalar statement of the rules
    that `DesignSpace` applies vectorized; tests check the two agree."""
    if s.tp * s.pp * s.dp * s.cp != n_gpus:
        return f"tp*pp*dp*cp = {s.tp * s.pp * s.dp * s.cp} != n_gpus {n_gpus}"
    if hb_domain_size % s.tp and s.tp % hb_domain_size:
        return f"tp {s.tp} neither divides the HB domain size {hb_domain_size} nor is a multiple of it"
    for what, n in _tp_divides(llm):
        if n % s.tp:
            return f"tp {s.tp} does not divide {what} {n}"
    kv = llm.kv_heads_effective
    if kv % s.tp and s.tp % kv:
        return f"tp {s.tp} and kv_heads {kv} do not divide one another"
    if s.pp > llm.layers:
        return f"pp {s.pp} exceeds layers {llm.layers}"
    if s.cp > 1 and training.sequence_length % (2 * s.cp):
        return f"sequence length {training.sequence_length} is not a multiple of 2*cp = {2 * s.cp}"
    if llm.moe is None:
        if s.ep != 1:
            return f"ep {s.ep} > 1 on a dense model"
    else:
        if llm.moe.experts % s.ep:
            return f"ep {s.ep} does not divide experts {llm.moe.experts}"
        if (s.dp * s.cp) % s.ep:
            return f"ep {s.ep} does not divide dp*cp = {s.dp * s.cp}"
    gb = s.global_batch_sequences or training.global_batch_sequences
    if s.global_batch_sequences is not None and not training.batch_allowed(gb):
        return f"global batch {gb} is outside the training's batch range {list(training.batch_range)}"
    if gb % (s.dp * s.microbatch_size):
        return f"global batch {gb} is not a multiple of dp*microbatch = {s.dp * s.microbatch_size}"
    if s.sequence_parallel and s.tp == 1:
        return "sequence parallelism needs tp > 1"
    n_micro = gb // (s.dp * s.microbatch_size)
    if n_micro % s.pipeline_flushes:
        return f"microbatches {n_micro} not divisible by pipeline_flushes {s.pipeline_flushes}"
    n_micro //= s.pipeline_flushes  # per pipeline schedule
    if s.schedule == Schedule.interleaved:
        if s.virtual_stages < 2:
            return "the interleaved schedule needs virtual_stages >= 2"
        if s.pp < 2:
            return "the interleaved schedule needs pp >= 2"
        if s.pp * s.virtual_stages > llm.layers:
            return f"pp*virtual_stages = {s.pp * s.virtual_stages} exceeds layers {llm.layers}"
        if n_micro % s.pp:
            return f"microbatches {n_micro} not divisible by pp {s.pp} (interleaved schedule)"
    elif s.virtual_stages != 1:
        return f"virtual_stages {s.virtual_stages} needs the interleaved schedule"
    if s.schedule == Schedule.dualpipe:
        if s.pp < 2 or s.pp % 2 or n_micro % 2 or n_micro < 2 * s.pp:
            return f"DualPipe needs an even pp >= 2 and an even microbatch count >= 2 x pp (pp {s.pp}, {n_micro})"
    if (s.zeropp_quantized_weights or s.zeropp_quantized_gradients or s.zeropp_hierarchical_partition) and s.zero_stage != 3:
        return "ZeRO++ (qwZ/qgZ/hpZ) needs ZeRO stage 3"
    if s.offload_weights and s.zero_stage != 3:
        return "weight offload needs ZeRO stage 3 (FSDP)"
    if training.optimizer == "muon" and (s.zero_stage >= 2 or s.offload_optimizer or s.offload_weights or (
            s.shard_group_size is not None and s.shard_group_size < s.dp * s.cp)):
        return MUON_RULE
    if s.cp > 1 and s.cp_comm == "a2a" and not llm.ulysses_fits(s.tp, s.cp):
        return (f"cp_comm a2a needs tp*cp = {s.tp * s.cp} to divide heads {llm.heads} and cp {s.cp} a TP rank's "
                f"{max(llm.kv_heads_effective // s.tp, 1)} key/value heads")
    return None


def _tp_divides(llm: LLMSpec) -> list[tuple[str, int]]:
    out = [("heads", llm.heads), ("hidden_size", llm.hidden_size), ("ffn_size", llm.ffn_size)]
    if llm.moe is not None:
        out.append(("expert_ffn_size", llm.moe.expert_ffn_size))
    return out


def _tp_ok(llm: LLMSpec, tp: int) -> bool:
    kv = llm.kv_heads_effective
    return all(n % tp == 0 for _, n in _tp_divides(llm)) and (kv % tp == 0 or tp % kv == 0)


@dataclass(frozen=True)
class StrategyTable:
    """Strategies as columns (numpy arrays, one entry per strategy, COLUMNS order). `schedule` and
    `recompute` hold indices into SCHEDULES and RECOMPUTES."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(len(self.columns["tp"]))

    def key(self, i: int) -> tuple:
        return tuple(self.columns[c][i].item() for c in COLUMNS)

    def strategy(self, i: int) -> Strategy:
        return strategy_from_key(self.key(i))

    def strategies(self) -> list[Strategy]:
        return [self.strategy(i) for i in range(len(self))]

    def take(self, idx: np.ndarray) -> "StrategyTable":
        return StrategyTable({c: v[idx] for c, v in self.columns.items()})

    @staticmethod
    def from_strategies(strategies: list[Strategy]) -> "StrategyTable":
        keys = [strategy_key(s) for s in strategies]
        arr = np.array(keys, dtype=np.int64).reshape(len(keys), len(COLUMNS))
        return StrategyTable({c: _typed(c, arr[:, j]) for j, c in enumerate(COLUMNS)})


_BOOL_COLS = {"sequence_parallel", "zeropp_quantized_weights", "zeropp_quantized_gradients",
              "zeropp_hierarchical_partition", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer",
              "offload_weights", "overlap_ep_comm", "cuda_graphs"}


def module_masks(llm: LLMSpec, lists: tuple[tuple[RecomputeModule, ...], ...]) -> tuple[int, ...]:
    """The study's selective-recompute module lists as bitmasks for `llm`: modules the model lacks
    (moe and moe_act without experts, mla_up_proj without MLA) leave a list, a list left empty is
    dropped, and lists left alike merge (the first kept). No list left: Megatron's default."""
    absent = set()
    if llm.moe is None:
        absent |= {RecomputeModule.moe, RecomputeModule.moe_act}
    if llm.mla is None:
        absent.add(RecomputeModule.mla_up_proj)
    masks = []
    for modules in lists:
        kept = tuple(m for m in modules if m not in absent)
        if modules and not kept:
            continue
        masks.append(recompute_module_mask(kept))
    return tuple(dict.fromkeys(masks)) or (recompute_module_mask(()),)


def recompute_modules_of(mask: int) -> tuple[RecomputeModule, ...]:
    """The modules of a bitmask; () for Megatron's default (core_attn alone)."""
    if mask == recompute_module_mask(()):
        return ()
    return tuple(RecomputeModule(n) for j, n in enumerate(RECOMPUTE_MODULE_BITS) if mask >> j & 1)


def module_mask_of_label(label: str) -> int:
    return recompute_module_mask(tuple(RecomputeModule(n) for n in label.split("+")))


def _typed(col: str, values: np.ndarray) -> np.ndarray:
    if col in _BOOL_COLS:
        return values.astype(bool)
    return values.astype(np.int64)


# The free dimensions in blocks of consecutive FREE_DIMS positions such that no rule couples two
# blocks: a layout's valid free rows are then the product of each block's valid rows, and that product
# taken in row-major order is the free grid's own order. The rules per block: sequence parallelism
# needs tp > 1; a microbatch x schedule pair must split the batch (and interleaving and DualPipe need
# their pipeline depth), and a balanced pipeline split exists only where it differs from Megatron's
# and leaves each end stage a layer per virtual stage (two under DualPipe, whose ranks hold halves);
# ZeRO++ and weight offload need ZeRO-3 and only selective recompute tries module lists (the same
# for every layout); Ulysses (cp_comm a2a)
# needs tp * cp to divide the heads and cp a TP rank's key/value heads; a dense model takes the first EP overlap and
# dispatcher values (it has neither), and an MoE model overlaps its all-to-all only with ep > 1, the
# alltoall or deepep dispatcher and at most one MTP layer; the other dimensions have no rule.
_BLOCKS: tuple[tuple[str, ...], ...] = (
    ("sequence_parallel",),
    ("microbatch_size", "schedule", "pipeline_split"),
    ("zero_stage", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
     "recompute", "recompute_modules", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights"),
    ("offload_activation_layers",), ("cp_comm",), ("overlap_ep_comm", "moe_dispatcher"), ("cuda_graphs",),
)
_PAIR_BLOCK = 1  # the microbatch x schedule x pipeline split block, which also sets each row's global batch
assert tuple(d for b in _BLOCKS for d in b) == FREE_DIMS, "the blocks must tile FREE_DIMS in order"

# Built spaces, least recently used first out. A co-design run asks for the space of the same
# (model, training, strategy space, GPU count, HB size) once per design and per caller; designs that
# share a GPU count and HB size share the space. An entry holds the layouts and, per layout, the
# valid rows of each block (kilobytes, never the strategy table), so 256 entries stay small.
DESIGN_SPACE_CACHE_SIZE = 256


def _split_batch(training: TrainingSpec, dp: int, pp: int, mbs: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """Per (microbatch size, schedule code) of a layout with `dp` and `pp`, the global batch it runs:
    0 for the training's target, the allowed batch nearest the target (the larger on a tie) when the
    target does not split, -1 when no allowed batch does. A batch splits when dp x microbatch divides
    it, with a microbatch count divisible by pp under the interleaved schedule (Megatron) and even and
    >= 2 x pp under DualPipe."""
    unit = dp * mbs
    q = unit * np.where(schedule == _INTERLEAVED, pp, 1) * np.where(schedule == _DUALPIPE, 2, 1)
    floor_b = np.where(schedule == _DUALPIPE, 2 * pp * unit, q)  # DualPipe: at least 2 x pp microbatches
    t = training.global_batch_sequences
    fits_target = (t % q == 0) & (t >= floor_b)
    if not training.batch_is_flexible:
        return np.where(fits_target, 0, -1).astype(np.int64)
    if training.global_batch_choices:
        choices = np.array(training.global_batch_choices, dtype=np.int64)
        good = (choices[None, :] % q[:, None] == 0) & (choices[None, :] >= floor_b[:, None])
        dist = np.where(good, np.abs(choices[None, :] - t) * 2 - (choices[None, :] > t), np.iinfo(np.int64).max)
        j = np.argmin(dist, axis=1)
        best = np.where(good[np.arange(len(q)), j], choices[j], -1)
    else:
        # the multiples of q in [first, last]; the nearest to the target, a tie to the larger
        lo, hi = training.batch_range
        first = -(-np.maximum(lo, floor_b) // q) * q
        last = (hi // q) * q
        below = np.clip((t // q) * q, first, last)
        above = np.clip(-(-t // q) * q, first, last)
        best = np.where(above - t <= t - below, above, below)
        best = np.where(first <= last, best, -1)
    return np.where(fits_target, 0, np.where(best == t, 0, best)).astype(np.int64)


def strategy_batch(training: TrainingSpec, strategy: Strategy) -> int | None:
    """The global batch a strategy runs when it does not state one: the training's target where it
    splits over dp x microbatch (and the schedule's microbatch rules), else the allowed batch nearest
    the target (the search's rule); None when no allowed batch splits."""
    code = SCHEDULES.index(strategy.schedule)
    b = int(_split_batch(training, strategy.dp, strategy.pp, np.array([strategy.microbatch_size]),
                         np.array([code]))[0])
    return None if b < 0 else (b or training.global_batch_sequences)


@dataclass(frozen=True)
class _LayoutFactors:
    """One layout's valid free rows as a product: per block of _BLOCKS, its valid rows as indices into
    `free_values` (one column per dimension, rows in row-major order), and the global batch of each
    row of the microbatch x schedule block."""

    blocks: tuple[np.ndarray, ...]
    pair_batch: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(b) for b in self.blocks)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, eq=False)
class DesignSpace:
    """The valid strategies of one (model, training, design) triple: layouts x free grid, each layout's
    valid free rows held as a product of per-block valid rows (see _BLOCKS), so sizes, choices and the
    nearest valid strategy cost nothing like the full table, and enumeration costs what it yields.

    Instances are shared (DesignSpace.build memoizes), hence immutable: arrays are read-only and the
    lazily computed attributes depend only on the fields."""

    llm: LLMSpec
    training: TrainingSpec
    n_gpus: int
    hb_domain_size: int
    layouts: np.ndarray  # (L, 5) int64 columns tp, pp, dp, cp, ep
    free_values: dict[str, tuple]  # per FREE_DIMS dimension, its values (schedule: (code, v) pairs)

    # ---- construction -------------------------------------------------------------------------
    @staticmethod
    def build(llm: LLMSpec, training: TrainingSpec, space: StrategySpace, *, n_gpus: int,
              hb_domain_size: int) -> "DesignSpace":
        """The space of a design, built once per distinct inputs (all frozen records, so hashable)
        while it stays among the DESIGN_SPACE_CACHE_SIZE most recently used: every caller of one
        design's space (the method choice, the search, the checks) gets the same object."""
        return _build_cached(llm, training, space, n_gpus, hb_domain_size)

    @staticmethod
    def build_uncached(llm: LLMSpec, training: TrainingSpec, space: StrategySpace, *, n_gpus: int,
                       hb_domain_size: int) -> "DesignSpace":
        if n_gpus < 1 or hb_domain_size < 1:
            raise SpecError(f"design: n_gpus {n_gpus} and hb_domain_size {hb_domain_size} must be >= 1")
        tp_vals = [t for t in tp_candidates(space, hb_domain_size)
                   if tp_fits_hb(t, hb_domain_size, space.max_tp_hb_domains) and _tp_ok(llm, t)]
        # every depth up to max_pp: stages may be uneven (designer.spec.llm.pipeline_stage_layers)
        pp_vals = [p for p in (space.pp or range(1, min(space.max_pp, llm.layers) + 1)) if p <= llm.layers]
        cp_vals = [c for c in space.cp if c == 1 or training.sequence_length % (2 * c) == 0]
        if llm.moe is None:
            ep_vals = [1]  # expert parallelism has no meaning for a dense model
        else:
            ep_vals = [e for e in (space.ep or divisors(llm.moe.experts)) if llm.moe.experts % e == 0]
        layouts = []
        for tp in tp_vals:
            for pp in pp_vals:
                for cp in cp_vals:
                    if n_gpus % (tp * pp * cp):
                        continue
                    dp = n_gpus // (tp * pp * cp)
                    for ep in ep_vals:
                        if (dp * cp) % ep == 0:
                            layouts.append((tp, pp, dp, cp, ep))
        sched_opts: list[tuple[int, int]] = []
        for s in space.schedules:
            if s == Schedule.interleaved:
                sched_opts += [(_INTERLEAVED, v) for v in space.virtual_stages]
            else:
                sched_opts.append((SCHEDULES.index(s), 1))
        free_values: dict[str, tuple] = {
            "sequence_parallel": tuple(space.sequence_parallel),
            "microbatch_size": tuple(space.microbatch_sizes),
            "schedule": tuple(sched_opts),
            "pipeline_split": tuple(PIPELINE_SPLITS.index(p) for p in space.pipeline_split),
            "zero_stage": tuple(space.zero_stages),
            "zeropp_quantized_weights": tuple(space.zeropp_quantized_weights),
            "zeropp_quantized_gradients": tuple(space.zeropp_quantized_gradients),
            "zeropp_hierarchical_partition": tuple(space.zeropp_hierarchical_partition),
            "recompute": tuple(RECOMPUTES.index(r) for r in space.recompute),
            "recompute_modules": module_masks(llm, space.recompute_modules),
            "overlap_dp_comm": tuple(space.overlap_dp_comm),
            "overlap_tp_comm": tuple(space.overlap_tp_comm),
            "offload_optimizer": tuple(space.offload_optimizer),
            "offload_weights": tuple(space.offload_weights),
            "offload_activation_layers": tuple(space.offload_activation_layers),
            "cp_comm": tuple(CODED["cp_comm"].index(c) for c in space.cp_comm),
            "overlap_ep_comm": tuple(space.overlap_ep_comm),
            "moe_dispatcher": tuple(CODED["moe_dispatcher"].index(c) for c in space.moe_dispatcher),
            "cuda_graphs": tuple(space.cuda_graphs),
        }
        lay = np.array(layouts, dtype=np.int64).reshape(-1, 5)
        lay.setflags(write=False)
        return DesignSpace(llm, training, n_gpus, hb_domain_size, lay, free_values)

    # ---- the free grid, factored per layout --------------------------------------------------
    @property
    def free_shape(self) -> tuple[int, ...]:
        """The free grid's shape: the number of values of each FREE_DIMS dimension."""
        return tuple(len(self.free_values[d]) for d in FREE_DIMS)

    @cached_property
    def _values(self) -> dict[str, np.ndarray]:
        """Per free dimension, its values as an array (schedule: (n, 2) code and virtual stages)."""
        out = {}
        for d in FREE_DIMS:
            vals = self.free_values[d]
            arr = np.array(vals, dtype=np.int64).reshape(-1, 2) if d == "schedule" else _typed(d, np.array(vals, dtype=np.int64))
            arr.setflags(write=False)
            out[d] = arr
        return out

    @cached_property
    def _zero_block(self) -> np.ndarray:
        """The valid rows of the ZeRO block, the same for every layout: ZeRO++ and weight offload
        need ZeRO-3; a row that is not selective recompute takes the first module list; Muon needs
        ZeRO 0 or 1 and no offload."""
        dims = _BLOCKS[2]
        idx = np.indices(tuple(len(self.free_values[d]) for d in dims)).reshape(len(dims), -1).T
        v = {d: self._values[d][idx[:, j]] for j, d in enumerate(dims)}
        not3 = v["zero_stage"] != 3
        zpp = v["zeropp_quantized_weights"] | v["zeropp_quantized_gradients"] | v["zeropp_hierarchical_partition"]
        modules_unused = (v["recompute"] != RECOMPUTES.index(Recompute.selective)) & (
            v["recompute_modules"] != self.free_values["recompute_modules"][0])
        bad = ((zpp | v["offload_weights"]) & not3) | modules_unused
        if self.training.optimizer == "muon":  # MUON_RULE
            bad |= (v["zero_stage"] >= 2) | v["offload_optimizer"] | v["offload_weights"]
        out = idx[~bad].astype(np.int64)
        out.setflags(write=False)
        return out

    def _factor(self, layout: int) -> _LayoutFactors:
        tp, pp, dp, cp, ep = (int(x) for x in self.layouts[layout])
        v = self._values

        def all_of(d: str) -> np.ndarray:
            return np.arange(len(self.free_values[d]), dtype=np.int64)[:, None]

        sp = np.flatnonzero(~(v["sequence_parallel"] & (tp == 1)))[:, None]
        n_sched = len(v["schedule"])
        mi, si = np.divmod(np.arange(len(v["microbatch_size"]) * n_sched, dtype=np.int64), n_sched)
        code, stages = v["schedule"][si, 0], v["schedule"][si, 1]
        batch = _split_batch(self.training, dp, pp, v["microbatch_size"][mi], code)
        ok = batch >= 0
        ok &= (code != _INTERLEAVED) | ((pp >= 2) & (pp * stages <= self.llm.layers))
        ok &= (code != _DUALPIPE) | ((pp >= 2) & (pp % 2 == 0))
        # x the pipeline split: a balanced row where the balanced split exists for this depth and suits
        # the schedule; elsewhere it would repeat Megatron's, so it stays only when Megatron's is not listed
        splits = v["pipeline_split"]
        n_split = len(splits)
        mi, si, ki = np.repeat(mi, n_split), np.repeat(si, n_split), np.tile(np.arange(n_split), len(ok))
        code, stages, batch, ok = (np.repeat(x, n_split) for x in (code, stages, batch, ok))
        megatron = PIPELINE_SPLITS.index("megatron")
        ok &= ((splits[ki] == megatron) | (self._split_ends(pp, code, stages, splits[ki])[0] >= 0)
               | (megatron not in splits))
        pairs = np.stack([mi[ok], si[ok], ki[ok]], axis=1)
        cp_comm = all_of("cp_comm")
        if cp > 1 and not self.llm.ulysses_fits(tp, cp):
            cp_comm = cp_comm[v["cp_comm"] != CODED["cp_comm"].index("a2a")]
        blocks = (sp, pairs, self._zero_block, all_of("offload_activation_layers"), cp_comm,
                  self._ep_block(ep), all_of("cuda_graphs"))
        for b in blocks:
            b.setflags(write=False)
        return _LayoutFactors(blocks, batch[ok])

    @cached_property
    def _factors(self) -> tuple[_LayoutFactors, ...]:
        return tuple(self._factor(i) for i in range(len(self.layouts)))

    @cached_property
    def _layout_counts(self) -> np.ndarray:
        counts = np.array([f.size for f in self._factors], dtype=np.int64)
        counts.setflags(write=False)
        return counts

    @property
    def size(self) -> int:
        """The number of valid strategies."""
        return int(self._layout_counts.sum())

    def __len__(self) -> int:
        return self.size

    def free_rows(self, layout: int) -> np.ndarray:
        """The flat indices (row-major over `free_shape`) of the free-grid rows valid with `layout`, ascending."""
        f = self._factors[layout]
        strides = np.array([math.prod(self.free_shape[j + 1:]) for j in range(len(FREE_DIMS))], dtype=np.int64)
        rows = np.zeros(1, np.int64)
        j = 0
        for block in f.blocks:
            offsets = block @ strides[j:j + block.shape[1]] if len(block) else np.zeros(0, np.int64)
            rows = (rows[:, None] + offsets[None, :]).reshape(-1)
            j += block.shape[1]
        return rows

    def free_mask(self, layout: int) -> np.ndarray:
        """Which rows of the full free grid (row-major over `free_shape`) are valid with `layout`."""
        mask = np.zeros(math.prod(self.free_shape), bool)
        mask[self.free_rows(layout)] = True
        return mask

    def _fill(self, layout: int, out: dict[str, np.ndarray], start: int) -> None:
        """Write the valid strategies of one layout into the columns `out` from row `start`: each
        block's values broadcast over the product of the blocks, in one pass per column."""
        f = self._factors[layout]
        shape = f.shape
        end = start + f.size
        for c, x in zip(("tp", "pp", "dp", "cp", "ep"), self.layouts[layout]):
            out[c][start:end] = x

        def spread(col: str, k: int, values: np.ndarray) -> None:
            axis_shape = [1] * len(shape)
            axis_shape[k] = shape[k]
            out[col][start:end].reshape(shape)[...] = values.reshape(axis_shape)

        for k, (dims, block) in enumerate(zip(_BLOCKS, f.blocks)):
            for j, d in enumerate(dims):
                vals = self._values[d][block[:, j]]
                if d == "pipeline_split":
                    continue  # written below as the end stages' layer counts
                if d == "schedule":
                    spread("schedule", k, vals[:, 0])
                    spread("virtual_stages", k, vals[:, 1])
                else:
                    spread(d, k, vals)
        # a row that is not selective recompute took the first module list; it recomputes no module
        rows = slice(start, end)
        out["recompute_modules"][rows] = np.where(out["recompute"][rows] == RECOMPUTES.index(Recompute.selective),
                                                  out["recompute_modules"][rows], _DEFAULT_MODULES)
        spread("global_batch_sequences", _PAIR_BLOCK, f.pair_batch)
        pair = f.blocks[_PAIR_BLOCK]
        sched = self._values["schedule"][pair[:, 1]]
        ends = self._split_ends(int(self.layouts[layout][1]), sched[:, 0], sched[:, 1],
                                self._values["pipeline_split"][pair[:, 2]])
        spread("pp_first_stage_layers", _PAIR_BLOCK, ends[0])
        spread("pp_last_stage_layers", _PAIR_BLOCK, ends[1])

    def _ep_block(self, ep: int) -> np.ndarray:
        """The valid (EP overlap, dispatcher) rows of a layout with `ep`: a dense model has no all-to-all
        to overlap and no dispatcher, so it takes the first value of each; the 1F1B all-to-all overlap
        runs with ep > 1, the alltoall or deepep dispatcher and at most one MTP layer (Megatron-Core's
        TransformerConfig; its rules on the schedule and the recompute are the model's, code 29)."""
        n_ov, n_disp = len(self.free_values["overlap_ep_comm"]), len(self.free_values["moe_dispatcher"])
        ov, disp = (x.reshape(-1) for x in np.indices((n_ov, n_disp)))
        if self.llm.moe is None:
            keep = (ov == 0) & (disp == 0)
        else:
            overlap = self._values["overlap_ep_comm"][ov]
            allgather = self._values["moe_dispatcher"][disp] == CODED["moe_dispatcher"].index("allgather")
            keep = ~(overlap & ((ep < 2) | allgather | (self.llm.mtp_layers > 1)))
        return np.stack([ov[keep], disp[keep]], axis=1).astype(np.int64)

    def _split_ends(self, pp: int, code: np.ndarray, stages: np.ndarray,
                    split: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (schedule code, virtual stages, split) row at depth `pp`, the end stages' layer counts, -1
        for Megatron's split: a balanced row takes the balanced split where it exists and leaves each end
        stage a layer per virtual stage (two under DualPipe, whose ranks hold halves of two stages)."""
        ends = self._balanced_by_depth.get(pp)
        if ends is None:
            none = np.full(len(split), -1, np.int64)
            return none, none
        need = np.where(code == _DUALPIPE, 2, np.where(code == _INTERLEAVED, stages, 1))
        use = (split == PIPELINE_SPLITS.index("balanced")) & (min(ends) >= need)
        return np.where(use, ends[0], -1).astype(np.int64), np.where(use, ends[1], -1).astype(np.int64)

    @cached_property
    def _balanced_by_depth(self) -> dict[int, tuple[int, int] | None]:
        if PIPELINE_SPLITS.index("balanced") not in self._values["pipeline_split"]:
            return {}
        return {int(pp): balanced_end_stages(self.llm, self.training.sequence_length, int(pp))
                for pp in np.unique(self.layouts[:, 1])}

    def _rows_of(self, layouts: list[int]) -> StrategyTable:
        n = int(sum(self._layout_counts[i] for i in layouts))
        out = {c: np.empty(n, bool if c in _BOOL_COLS else np.int64) for c in COLUMNS}
        start = 0
        for i in layouts:
            self._fill(i, out, start)
            start += int(self._layout_counts[i])
        return StrategyTable(out)

    def _layout_rows(self, layout: int) -> dict[str, np.ndarray]:
        """The valid strategies of one layout, as columns."""
        return self._rows_of([layout]).columns

    def chunks(self, max_rows: int = 50_000) -> Iterator[StrategyTable]:
        """The valid strategies in a fixed order (layout by layout, each layout's in free-grid order),
        in tables of whole layouts, cut once they reach `max_rows`."""
        group: list[int] = []
        n = 0
        for i in np.flatnonzero(self._layout_counts):
            group.append(int(i))
            n += int(self._layout_counts[i])
            if n >= max_rows:
                yield self._rows_of(group)
                group, n = [], 0
        if group:
            yield self._rows_of(group)

    def table(self) -> StrategyTable:
        """Every valid strategy (materialized)."""
        parts = list(self.chunks(max_rows=1 << 62))
        if not parts:
            return StrategyTable({c: _typed(c, np.zeros(0, np.int64)) for c in COLUMNS})
        return parts[0]

    # ---- the dimensions a sampler chooses, and the nearest valid strategy --------------------
    @cached_property
    def choices(self) -> dict[str, tuple]:
        """Per searchable dimension, the values that occur in at least one valid strategy; only
        dimensions with two or more values are listed (the others are fixed)."""
        live = self._layout_counts > 0
        out: dict[str, tuple] = {}
        for d in ("tp", "pp", "cp", "ep"):
            col = {"tp": 0, "pp": 1, "cp": 3, "ep": 4}[d]
            vals = tuple(sorted({int(x) for x in self.layouts[live, col]}))
            if len(vals) > 1:
                out[d] = vals
        # a live layout's product holds every row of each of its blocks, so a value occurs in a valid
        # strategy exactly when it occurs in a live layout's block
        used: dict[str, set[int]] = {d: set() for d in FREE_DIMS}
        for i in np.flatnonzero(live):
            for dims, block in zip(_BLOCKS, self._factors[int(i)].blocks):
                for j, d in enumerate(dims):
                    used[d].update(int(x) for x in np.unique(block[:, j]))
        for d in FREE_DIMS:
            vals = tuple(self._free_label(d, self.free_values[d][k]) for k in sorted(used[d]))
            if len(vals) > 1:
                out[d] = vals
        return out

    @staticmethod
    def _free_label(dim: str, value: Any) -> Any:
        if dim == "schedule":
            return schedule_label(SCHEDULES[value[0]], value[1])
        if dim == "recompute":
            return RECOMPUTES[value].value
        if dim == "recompute_modules":
            return recompute_module_label(int(value))
        if dim == "pipeline_split":
            return PIPELINE_SPLITS[int(value)]
        if dim in CODED:
            return CODED[dim][int(value)]
        return value.item() if isinstance(value, np.generic) else value

    def nearest(self, params: dict[str, Any]) -> Strategy:
        """The valid strategy closest to a point of the product of `choices` (a sampler's suggestion):
        first the layout nearest in log2(tp, pp, cp, ep), then within it the free-grid row differing in
        the fewest dimensions (microbatch and ZeRO stage by distance). Ties go to the first in the
        space's fixed order, so the map is deterministic: a sampler optimizes f(nearest(x))."""
        live = np.flatnonzero(self._layout_counts > 0)
        if not len(live):
            raise SpecError("design has no valid strategy")
        lay = self.layouts[live]
        dist = np.zeros(len(live))
        for d, col in (("tp", 0), ("pp", 1), ("cp", 3), ("ep", 4)):
            if d in params:
                dist += np.abs(np.log2(lay[:, col]) - math.log2(int(params[d])))
        li = int(live[int(np.argmin(dist))])
        cols = self._layout_rows(li)
        fd = np.zeros(int(self._layout_counts[li]))
        for d in FREE_DIMS:
            if d not in params:
                continue
            want = params[d]
            if d == "schedule":
                sched, v = _parse_schedule(want)
                fd += (cols["schedule"] != sched) + 0.5 * (cols["virtual_stages"] != v)
            elif d == "recompute":
                fd += cols["recompute"] != RECOMPUTES.index(Recompute(want))
            elif d == "recompute_modules":
                # a module list is a selective row's own: the other rows hold the default, which a
                # pick for them does not ask to change
                fd += (cols["recompute"] == RECOMPUTES.index(Recompute.selective)) & (
                    cols["recompute_modules"] != module_mask_of_label(str(want)))
            elif d == "pipeline_split":
                fd += (cols["pp_first_stage_layers"] >= 0) != (want == "balanced")
            elif d == "microbatch_size":
                fd += np.abs(np.log2(cols[d]) - math.log2(int(want)))
            elif d in ("zero_stage", "offload_activation_layers"):
                fd += np.abs(cols[d] - int(want))
            elif d in CODED:
                fd += cols[d] != CODED[d].index(str(want))
            else:
                fd += cols[d] != bool(want)
        r = int(np.argmin(fd))
        return strategy_from_key(tuple(cols[c][r].item() for c in COLUMNS))

    def contains(self, s: Strategy) -> bool:
        return invalid_reason(s, self.llm, self.training, self.n_gpus, self.hb_domain_size) is None and \
            _in_allowed(self, s)


# The module's one global: the bounded LRU of built spaces (see DESIGN_SPACE_CACHE_SIZE).
@lru_cache(maxsize=DESIGN_SPACE_CACHE_SIZE)
def _build_cached(llm: LLMSpec, training: TrainingSpec, space: StrategySpace, n_gpus: int,
                  hb_domain_size: int) -> DesignSpace:
    return DesignSpace.build_uncached(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb_domain_size)


def _in_allowed(space: DesignSpace, s: Strategy) -> bool:
    lay = space.layouts
    hit = np.flatnonzero((lay[:, 0] == s.tp) & (lay[:, 1] == s.pp) & (lay[:, 2] == s.dp) & (lay[:, 3] == s.cp)
                         & (lay[:, 4] == s.ep))
    if not len(hit):
        return False
    cols = space._layout_rows(int(hit[0]))
    m = np.ones(int(space._layout_counts[hit[0]]), bool)
    for c, want in zip(COLUMNS, strategy_key(s)):
        m &= cols[c] == want
    return bool(m.any())


def reference_layout_rows(ds: DesignSpace) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The valid strategies of `ds` as the original enumeration found them, layout by layout (the
    layout's index and its strategies as columns): the whole free grid materialized, then per layout
    one pass of the vectorized rules over all of it. The reference the factored enumeration is tested
    and benchmarked against; its cost grows with layouts x free grid, however few strategies are valid."""
    shape = ds.free_shape
    grid = np.indices(shape).reshape(len(shape), -1).T.astype(np.int64)
    c: dict[str, np.ndarray] = {}
    for j, d in enumerate(FREE_DIMS):
        vals = ds.free_values[d]
        if d == "schedule":
            arr = np.array(vals, dtype=np.int64).reshape(-1, 2)
            c["schedule"], c["virtual_stages"] = arr[grid[:, j], 0], arr[grid[:, j], 1]
        else:
            c[d] = _typed(d, np.array(vals, dtype=np.int64)[grid[:, j]])
    inter, dual = c["schedule"] == _INTERLEAVED, c["schedule"] == _DUALPIPE
    zpp = c["zeropp_quantized_weights"] | c["zeropp_quantized_gradients"] | c["zeropp_hierarchical_partition"]
    # module lists belong to selective recompute: the other rows take the first, and recompute none
    selective = c["recompute"] == RECOMPUTES.index(Recompute.selective)
    modules_ok = selective | (c["recompute_modules"] == ds.free_values["recompute_modules"][0])
    c["recompute_modules"] = np.where(selective, c["recompute_modules"], _DEFAULT_MODULES)
    for i in range(len(ds.layouts)):
        tp, pp, dp, cp, ep = (int(x) for x in ds.layouts[i])
        batch = _split_batch(ds.training, dp, pp, c["microbatch_size"], c["schedule"])
        ok = batch >= 0
        ok &= ~(c["sequence_parallel"] & (tp == 1))
        ok &= ~inter | ((pp >= 2) & (pp * c["virtual_stages"] <= ds.llm.layers))
        ok &= ~dual | ((pp >= 2) & (pp % 2 == 0))
        ok &= ~(zpp & (c["zero_stage"] != 3))
        ok &= ~(c["offload_weights"] & (c["zero_stage"] != 3))
        if ds.training.optimizer == "muon":
            ok &= (c["zero_stage"] <= 1) & ~c["offload_optimizer"] & ~c["offload_weights"]
        ok &= modules_ok
        if cp > 1 and not ds.llm.ulysses_fits(tp, cp):
            ok &= c["cp_comm"] != CODED["cp_comm"].index("a2a")
        if ds.llm.moe is None:
            ok &= (c["overlap_ep_comm"] == ds.free_values["overlap_ep_comm"][0]) \
                & (c["moe_dispatcher"] == ds.free_values["moe_dispatcher"][0])
        else:
            allgather = c["moe_dispatcher"] == CODED["moe_dispatcher"].index("allgather")
            ok &= ~(c["overlap_ep_comm"] & ((ep < 2) | allgather | (ds.llm.mtp_layers > 1)))
        balanced = c["pipeline_split"] == PIPELINE_SPLITS.index("balanced")
        ends = balanced_end_stages(ds.llm, ds.training.sequence_length, pp) if balanced.any() else None
        # a balanced row runs the balanced split where it exists and the schedule allows it, and else
        # repeats Megatron's split, kept only when Megatron's is not among the choices
        runs_balanced = balanced & (ends is not None)
        if ends is not None:
            runs_balanced &= (~inter | (min(ends) >= c["virtual_stages"])) & (~dual | (min(ends) >= 2))
        if PIPELINE_SPLITS.index("megatron") in ds.free_values["pipeline_split"]:
            ok &= ~balanced | runs_balanced
        rows = np.flatnonzero(ok)
        k = len(rows)
        part = {"tp": np.full(k, tp, np.int64), "pp": np.full(k, pp, np.int64), "dp": np.full(k, dp, np.int64),
                "ep": np.full(k, ep, np.int64), "cp": np.full(k, cp, np.int64),
                "global_batch_sequences": batch[rows]}
        part.update({name: col[rows] for name, col in c.items() if name != "pipeline_split"})
        for j, name in enumerate(("pp_first_stage_layers", "pp_last_stage_layers")):
            part[name] = np.where(runs_balanced[rows], ends[j] if ends else -1, -1).astype(np.int64)
        yield i, part


def reference_chunks(ds: DesignSpace, max_rows: int = 50_000) -> Iterator[StrategyTable]:
    """`reference_layout_rows` cut into tables as `DesignSpace.chunks` cuts its own."""
    buf: list[dict[str, np.ndarray]] = []
    n = 0
    for _, part in reference_layout_rows(ds):
        k = len(part["tp"])
        if not k:
            continue
        buf.append(part)
        n += k
        if n >= max_rows:
            yield _concat(buf)
            buf, n = [], 0
    if buf:
        yield _concat(buf)


def clear_design_space_cache() -> None:
    """Forget every memoized space (a benchmark that times the build)."""
    _build_cached.cache_clear()


def _parse_schedule(label: str) -> tuple[int, int]:
    if label.startswith("interleaved:"):
        return _INTERLEAVED, int(label.split(":", 1)[1])
    return SCHEDULES.index(Schedule(label)), 1


def _concat(parts: list[dict[str, np.ndarray]]) -> StrategyTable:
    return StrategyTable({c: np.concatenate([p[c] for p in parts]) for c in COLUMNS})


@dataclass(frozen=True)
class Removed:
    """A value of one dimension the space leaves out, and the rule that removes it."""

    dim: str
    value: Any
    rule: str


def explain_space(llm: LLMSpec, training: TrainingSpec, space: StrategySpace, *, hb_domain_size: int,
                  n_gpus: int | None = None) -> list[Removed]:
    """Every value of the study's (or the default) tp, pp, cp and ep lists that no strategy can use on
    a platform of HB domain `hb_domain_size`, with its rule; with `n_gpus`, also the layouts the count
    rules out and the free-grid rows the batch rules remove, as counts."""
    out: list[Removed] = []
    for t in tp_candidates(space, hb_domain_size):
        if not tp_fits_hb(t, hb_domain_size, space.max_tp_hb_domains):
            if t % hb_domain_size:
                rule = f"does not divide the HB domain size {hb_domain_size}"
            else:
                rule = (f"spans {t // hb_domain_size} HB domains of {hb_domain_size}, more than "
                        f"max_tp_hb_domains {space.max_tp_hb_domains}")
            out.append(Removed("tp", t, rule))
            continue
        for what, n in _tp_divides(llm):
            if n % t:
                out.append(Removed("tp", t, f"does not divide {what} {n}"))
                break
        else:
            kv = llm.kv_heads_effective
            if kv % t and t % kv:
                out.append(Removed("tp", t, f"and kv_heads {kv} do not divide one another"))
    if tuple(space.sequence_parallel) == (True,) and 1 in tp_candidates(space, hb_domain_size):
        out.append(Removed("tp", 1, "sequence_parallel lists only true, which needs tp > 1"))
    for p_ in (space.pp or ()):
        if p_ > llm.layers:
            out.append(Removed("pp", p_, f"exceeds the {llm.layers} layers"))
    if not space.pp and space.max_pp > llm.layers:
        out.append(Removed("pp", f"{llm.layers + 1}..{space.max_pp}", f"exceeds the {llm.layers} layers"))
    for c in space.cp:
        if c > 1 and training.sequence_length % (2 * c):
            out.append(Removed("cp", c, f"sequence length {training.sequence_length} is not a multiple of 2*cp = {2 * c}"))
    if llm.moe is None:
        if space.ep and any(e != 1 for e in space.ep):
            out.append(Removed("ep", [e for e in space.ep if e != 1], "a dense model has no experts"))
        # listed by the study (the defaults name two of each for MoE models): only the first serves
        for dim in ("overlap_ep_comm", "moe_dispatcher"):
            values = getattr(space, dim)
            if dim in space.model_fields_set and len(values) > 1:
                out.append(Removed(dim, list(values[1:]), f"a dense model has no all-to-all: {values[0]!r} "
                                                          "(the first listed) serves"))
    else:
        for e in (space.ep or ()):
            if llm.moe.experts % e:
                out.append(Removed("ep", e, f"does not divide the {llm.moe.experts} experts"))
    if training.optimizer == "muon":
        for dim, values in (("zero_stage", [z for z in space.zero_stages if z >= 2]),
                            ("offload_optimizer", [v for v in space.offload_optimizer if v]),
                            ("offload_weights", [v for v in space.offload_weights if v])):
            if values:
                out.append(Removed(dim, values, MUON_RULE))
    lacks = {RecomputeModule.moe: "experts", RecomputeModule.moe_act: "experts", RecomputeModule.mla_up_proj: "MLA"}
    lacks = {m: what for m, what in lacks.items() if (llm.moe is None if what == "experts" else llm.mla is None)}
    for modules in space.recompute_modules:
        absent = [m.value for m in modules if m in lacks]
        if absent:
            kept = [m.value for m in modules if m not in lacks]
            has_not = " or ".join(dict.fromkeys(lacks[RecomputeModule(m)] for m in absent))
            fate = f"runs as {kept}" if kept else "is dropped"
            if not kept and all(all(m in lacks for m in other) and other for other in space.recompute_modules):
                fate += " (no list is left: Megatron's default, core_attn, runs)"
            out.append(Removed("recompute_modules", absent,
                               f"{llm.name} has no {has_not}: the list {[m.value for m in modules]} {fate}"))
    if n_gpus is not None:
        ds = DesignSpace.build(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb_domain_size)
        live = sum(1 for i in range(len(ds.layouts)) if ds._layout_counts[i] > 0)
        dead = len(ds.layouts) - live
        if dead:
            out.append(Removed("layout", dead, f"tp·pp·dp·cp layouts of {n_gpus:,} GPUs with no microbatch split of the "
                                                f"batch {list(training.batch_range) if training.batch_is_flexible else training.global_batch_sequences}"))
        if not len(ds.layouts):
            out.append(Removed("layout", 0, f"no tp·pp·cp of the lists divides {n_gpus:,}"))
    return out


def design_space(llm: LLMSpec, training: TrainingSpec, space: StrategySpace, *, n_gpus: int,
                 hb_domain_size: int) -> DesignSpace:
    return DesignSpace.build(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb_domain_size)


__all__ = ["COLUMNS", "DESIGN_SPACE_CACHE_SIZE", "DesignSpace", "RECOMPUTES", "Removed", "explain_space", "SCHEDULES",
           "StrategyTable", "clear_design_space_cache", "design_space", "invalid_reason", "tp_candidates", "tp_fits_hb", "reference_chunks",
           "reference_layout_rows", "module_mask_of_label", "module_masks", "recompute_modules_of",
           "schedule_label", "strategy_from_key", "strategy_key"]
