"""Validation against measured training runs: Megatron-LM on Selene (training-runs.md, 10 rows).

Achieved TFLOP/s per GPU is computed the paper's way, F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))
divided by (predicted iteration time × GPUs), and compared with the table. Targets: MAPE ≤ 5%,
every row within 10%. The per-row run settings come from tests/perf/data/megatron_table1.yaml
(sourced from the paper's launch script); the calibration is the shipped one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from designer import units
from designer.perf import collectives as coll
from designer.perf.iteration import megatron_paper_flops
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.compute import dense_layer_params
from designer.perf.placement import group_shape
from designer.perf.records import Metrics
from designer.spec.catalog import load_catalog
from designer.spec.llm import Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier

DATA = Path(__file__).parent / "data" / "megatron_table1.yaml"


def selene(n_gpus: int, sysdata: dict) -> ClusterSystem:
    """DGX A100 nodes (8 GPUs, NVLink3 300 GB/s/dir) on a rail-optimized HDR fat-tree: rail leaves
    per scalable unit of 20 nodes, a spine above them that crosses rails."""
    gpu = load_catalog().gpu(sysdata["gpu"]).perf()
    k = sysdata["hb_size"]
    nic = units.gbps_to_bytes_per_s(sysdata["nic_gbps"])
    n_dom = n_gpus // k
    tiers = (
        NetworkTier(name="leaf", span_domains=min(sysdata["leaf_span_nodes"], n_dom), cross_rail=False,
                    bandwidth_per_gpu_bytes_per_s=nic),
        NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic),
    )
    return ClusterSystem(gpu=gpu, n_gpus=n_gpus,
                         hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=sysdata["hb_bandwidth_gb_per_s"] * 1e9),
                         nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers, family="rail-optimized")


def megatron_cases():
    data = yaml.safe_load(DATA.read_text())
    common = data["common"]
    for row in data["rows"]:
        llm = load_model(row["model"])
        training = TrainingSpec(sequence_length=common["sequence_length"], global_batch_sequences=row["batch"],
                                precision=common["precision"], total_tokens=1e9)
        dp = row["gpus"] // (row["tp"] * row["pp"])
        strategy = Strategy(tp=row["tp"], pp=row["pp"], dp=dp, microbatch_size=row["mbs"],
                            schedule=Schedule.interleaved if row["v"] > 1 else Schedule.one_f_one_b,
                            virtual_stages=row["v"], zero_stage=common["zero_stage"],
                            recompute=Recompute(common["recompute"]), overlap_dp_comm=row["overlap_dp"],
                            attention_kernel=common["attention_kernel"], overlap_pp_comm=common["overlap_pp_comm"],
                            pipeline_scatter_gather=common["pipeline_scatter_gather"])
        yield row, llm, training, strategy, selene(row["gpus"], common["system"])


def megatron_calibration(calib=None):
    """The shipped calibration (the 2021 software stack's attention kernel is a strategy field)."""
    return calib or load_perf_calibration()


def megatron_errors(calib=None, cases=None):
    """[(model, predicted TFLOP/s per GPU, measured, relative error)]."""
    calib = megatron_calibration(calib)
    out = []
    for row, llm, training, strategy, system in cases or megatron_cases():
        m = evaluate_system(llm, training, strategy, system, calib=calib)
        assert isinstance(m, Metrics), m
        tflops = megatron_paper_flops(llm, training) / (m.iteration_time_s * row["gpus"]) / 1e12
        out.append((row["model"], tflops, row["tflops"], tflops / row["tflops"] - 1.0))
    return out


def test_megatron_table1_within_targets():
    errs = megatron_errors()
    lines = [f"{name:10s} predicted {pred:6.1f} measured {meas:5.0f} error {100 * e:+5.1f}%" for name, pred, meas, e in errs]
    mape = sum(abs(e) for *_, e in errs) / len(errs)
    print("\n" + "\n".join(lines) + f"\nMAPE {100 * mape:.2f}%")
    assert mape <= 0.05, f"MAPE {100 * mape:.2f}% > 5%\n" + "\n".join(lines)
    assert all(abs(e) <= 0.10 for *_, e in errs), "\n".join(lines)


def test_megatron_rows_fit_in_80gb():
    """Every configuration of Table 1 ran on 80 GB GPUs, so the model must find it feasible."""
    calib = megatron_calibration()
    for row, llm, training, strategy, system in megatron_cases():
        m = evaluate_system(llm, training, strategy, system, calib=calib)
        assert isinstance(m, Metrics) and m.fits_in_memory, (row["model"], m)


def test_paper_flops_formula_matches_the_table_aggregate():
    """F/(time·GPUs) identity check on the table itself: 1T row, 163 TFLOP/s × 3072 GPUs ≈ 502 PFLOP/s
    (the table's aggregate column)."""
    assert 163e12 * 3072 / 1e15 == pytest.approx(502.0, rel=0.01)


# Narayanan et al. SC'21 (arXiv 2104.04473) §5.2, Table 2: DeepSpeed ZeRO-3 without model parallelism
# on the same Selene nodes, fp16, seq 2048, achieved TFLOP/s per GPU by the paper's formula.
# (model, global batch, GPUs, microbatch, TFLOP/s). Every run holds one microbatch per GPU; from 768
# GPUs on the iteration time stays at 66.6 s while the compute per GPU halves: communication-bound.
ZERO3_TABLE2 = [("gpt3-175b", 1536, 384, 4, 144), ("gpt3-175b", 1536, 768, 2, 88), ("gpt3-175b", 1536, 1536, 1, 44),
                ("gpt-530b", 2240, 1120, 2, 98), ("gpt-530b", 2240, 2240, 1, 48)]


def zero3_table2_runs(calib=None):
    """Each Table 2 run as the model evaluates it: (name, llm, training, system, metrics, measured
    TFLOP/s), ZeRO-3 over every GPU with full recompute and the 2021 unfused attention."""
    calib = megatron_calibration(calib)
    sysdata = yaml.safe_load(DATA.read_text())["common"]["system"]
    for model, batch, gpus, mbs, measured in ZERO3_TABLE2:
        llm = load_model(model)
        training = TrainingSpec(sequence_length=2048, global_batch_sequences=batch, precision="fp16", total_tokens=1e9)
        strategy = Strategy(dp=gpus, microbatch_size=mbs, zero_stage=3, recompute=Recompute.full,
                            attention_kernel="unfused")
        system = selene(gpus, sysdata)
        m = evaluate_system(llm, training, strategy, system, calib=calib)
        assert isinstance(m, Metrics), m
        yield f"{model} x{gpus}", llm, training, system, m, measured


def zero3_table2_errors(calib=None):
    out = []
    for name, llm, training, system, m, measured in zero3_table2_runs(calib):
        tflops = megatron_paper_flops(llm, training) / (m.iteration_time_s * system.n_gpus) / 1e12
        out.append((name, tflops, measured, tflops / measured - 1.0))
    return out


# DeepSpeed v0.3.16 (deepspeed/runtime/zero/partition_parameters.py): ZeRO-3 gathers each parameter
# tensor on its own after torch.cuda.synchronize() (_allgather_param) and reduce-scatters each
# gradient on its own (_reduce_scatter_gradient); tensors under stage3_param_persistence_threshold
# (1e5 elements) stay gathered after their first use.
DEEPSPEED_PERSISTENCE_THRESHOLD = 1e5


def gpt_parameter_tensors(llm) -> list[int]:
    """Elements of each parameter tensor of one Megatron GPT layer (fused QKV, biases, LayerNorms)."""
    h, f = llm.hidden_size, llm.ffn_size
    return [h, h, 3 * h * h, 3 * h, h * h, h, h, h, h * f, f, f * h, h]


def zero3_per_tensor_times():
    """[(run, compute s, per-tensor collectives s, measured s)]: the model's compute, then every
    parameter tensor gathered before the forward and again before the backward and its gradient
    reduce-scattered, one NCCL call each, back to back (nothing overlaps after a device synchronize);
    the embeddings are two more tensors, persistent tensors are gathered once."""
    calib = megatron_calibration()
    out = []
    for name, llm, training, system, m, measured in zero3_table2_runs(calib):
        gpus = system.n_gpus
        g = group_shape(np.array([gpus]), np.array([1]), system)
        layer = np.array(gpt_parameter_tensors(llm), float)
        assert layer.sum() == dense_layer_params(llm)  # the same layer designer counts, split into tensors
        # per tensor: how often it appears per iteration (layers, or once for the embeddings)
        elements = np.concatenate([layer, [llm.vocab_size * llm.hidden_size, training.sequence_length * llm.hidden_size]])
        copies = np.concatenate([np.full(layer.size, llm.layers), [1, 1]])
        gathers = np.where(elements >= DEEPSPEED_PERSISTENCE_THRESHOLD, 2, 1)

        def call_s(op):
            return coll.collective_time_s_vec(op, 2.0 * elements, g.size, g.ranks_per_domain, g.extent_domains,
                                              g.same_rail, system, calib.collectives)

        comm = float(np.sum(copies * (gathers * call_s("all_gather") + call_s("reduce_scatter"))))
        measured_s = megatron_paper_flops(llm, training) / (measured * 1e12 * gpus)
        out.append((name, m.breakdown.compute_s, comm, measured_s))
    return out


def test_sc21_table2_deepspeed_per_tensor_collectives_still_fall_short():
    """The README's account of Table 2: pricing DeepSpeed v0.3.16's per-tensor, synchronised
    collectives with designer's NCCL model leaves every run 20-55% short of the measured time, and
    what is missing follows the bytes moved (530B against 175B) more than the calls."""
    rows = zero3_per_tensor_times()
    print("\n" + "\n".join(f"{name:16s} compute {c:6.1f} s + collectives {k:5.1f} s = {c + k:6.1f} s, measured {t:6.1f} s"
                            for name, c, k, t in rows))
    short = [1.0 - (c + k) / t for _, c, k, t in rows]
    assert all(0.15 <= s <= 0.55 for s in short), short
    missing = {name: t - c - k for name, c, k, t in rows}
    # at similar rank counts the 530B runs (3x the bytes, 1.1x the calls) miss over twice the time of
    # the 175B ones: a cost per call, per rank, cannot be what is missing
    assert missing["gpt-530b x1120"] > 2.0 * missing["gpt3-175b x768"]
    assert missing["gpt-530b x2240"] > 2.0 * missing["gpt3-175b x1536"]


@pytest.mark.xfail(strict=True, reason="DeepSpeed ZeRO-3 at 384-2240 A100s (2021) is 1.5-3.6x slower than the "
                                       "per-layer NCCL ring gathers and reduce-scatters the model prices")
def test_sc21_table2_zero3_without_model_parallelism():
    errs = zero3_table2_errors()
    print("\n" + "\n".join(f"{name:16s} predicted {p:6.1f} measured {m:4.0f} error {100 * e:+6.1f}%" for name, p, m, e in errs))
    assert all(abs(e) <= 0.10 for *_, e in errs)
