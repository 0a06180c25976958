"""The scalar statement of the strategy-space rules the brute-force enumerations in these tests apply
(designer.search.space states them vectorized): the pipeline split a row runs, the EP overlap
and dispatcher values a model and layout take, and the recompute module lists."""

from designer.perf.iteration import balanced_end_stages
from designer.spec.llm import Recompute, Schedule


def split_ends(llm, training, space, pp, schedule, virtual_stages, split):
    """(first, last) end-stage layers the row runs, (None, None) for Megatron's split, None when the
    row does not exist: a balanced row runs the balanced split where one exists at this depth and each
    end stage holds a layer per virtual stage (two under DualPipe); elsewhere it would repeat
    Megatron's split, so it exists only when Megatron's is not a choice."""
    if split == "megatron":
        return None, None
    ends = balanced_end_stages(llm, training.sequence_length, pp)
    need = 2 if schedule == Schedule.dualpipe else virtual_stages if schedule == Schedule.interleaved else 1
    if ends is not None and min(ends) >= need:
        return ends
    return None if "megatron" in space.pipeline_split else (None, None)


def moe_values_apply(llm, space, overlap_ep_comm, moe_dispatcher, ep):
    """A dense model has no all-to-all to overlap and no dispatcher: only the first listed values. An
    MoE model overlaps its all-to-all only with ep > 1, the alltoall or deepep dispatcher and at most
    one MTP layer (Megatron-Core's TransformerConfig)."""
    if llm.moe is None:
        return overlap_ep_comm == space.overlap_ep_comm[0] and moe_dispatcher == space.moe_dispatcher[0]
    return not (overlap_ep_comm and (ep < 2 or moe_dispatcher == "allgather" or llm.mtp_layers > 1))


def module_lists(llm, space):
    """The selective-recompute module lists a model's space tries, restated over sets: each study
    list without the modules the model lacks (moe and moe_act without experts, mla_up_proj without
    MLA), a list so emptied dropped, lists naming the same modules (the empty one is core_attn) kept
    once, the first; none left, Megatron's default."""
    absent = set()
    if llm.moe is None:
        absent |= {"moe", "moe_act"}
    if llm.mla is None:
        absent.add("mla_up_proj")
    out, seen = [], []
    for listed in space.recompute_modules:
        kept = tuple(m for m in listed if m.value not in absent)
        if listed and not kept:
            continue
        names = {m.value for m in kept} or {"core_attn"}
        if names not in seen:
            seen.append(names)
            out.append(kept)
    return out or [()]


def recompute_rows(llm, space):
    """(recompute, modules) of the rows a space holds: selective with each module list, the other
    recompute choices once (with no modules)."""
    lists = module_lists(llm, space)
    return [(rc, modules if rc == Recompute.selective else ()) for rc in space.recompute
            for modules in (lists if rc == Recompute.selective else lists[:1])]
