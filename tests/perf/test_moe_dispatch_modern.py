"""The MoE dispatch/combine estimates against the expert-parallel kernel figures of
shared/reference/collectives-modern.md §7, transcribed in tests/perf/data/nccl_curves_modern.yaml
(UCCL-EP on AWS p5en / p6-b200, its replicate, Hybrid-EP on H100 / B200 / GB200, DeepEP V1 and
UCCL-EP on EFA, DeepEP on p5en, pplx-garden's and DeepEP's decode kernels on ConnectX-7 and EFA).
The normal kernels are priced by the deduplicating estimate (moe_dispatch_estimate_vec), the
low-latency (decode) kernels by the per-expert one (moe_per_expert_dispatch_estimate_vec). Each
entry's setup becomes a ClusterSystem and the kernel's workload; the model's time is turned into the
source's own quantity, as the benchmark that produced it counts it. Run with -s for the table.
Nothing here is fitted per entry."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from designer import units
from designer.perf import collectives as coll
from designer.spec.catalog import load_catalog
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier
from tests.perf.collective_curves import DEFAULT_NIC_GBPS_PER_GPU, EFA_PATH_LATENCY_S, curves

CAL = coll.load_collective_calibration()
TOL = 0.20  # the collective-fidelity target for dispatch/combine bandwidths and latencies
# Bytes per element: DeepEP's normal kernels send FP8 with an fp32 scale per 128 channels
# (tests/test_internode.py: hidden * (1 + 4/128)); BF16 2.
FP8 = 1.0 + 4.0 / 128
BF16 = 2.0
# The DeepEP benchmark's defaults (deepseek-ai/DeepEP tests/test_intranode.py, test_internode.py),
# which UCCL-EP's tests keep: 4096 tokens, hidden 7168, top-8, (256 // ranks) * ranks experts,
# min(nodes, 4) top groups (node-limited routing: a token reaches at most 4 nodes).
DEFAULT_WORKLOAD = {"tokens": 4096, "hidden": 7168, "topk": 8}
MAX_NODES_PER_TOKEN = 4
# p6-b200's EFA path: the harness's p6 figure (p6-b300, B300-1's small-message floor); aws-ofi-nccl
# puts p5en and all p6 instances in one latency class (src/platform-aws.cpp), and the normal kernels
# here run for milliseconds, so the latency only decides the low-latency rows.
EFA_LATENCY_S = {**EFA_PATH_LATENCY_S, "b200": EFA_PATH_LATENCY_S["b300"]}

# Entries the model cannot state, by prefix, with the reason.
NOT_MODELLED = {
    "EP-W1-deepepv2gdaki-": "DeepEP V2 + GDAKI decode: workload not published",
    "EP-W1-uccl-decode-": "UCCL-EP decode: workload not published and the figure read approximately off a chart",
    "EP-H3-r24-deepep-": "DeepEP on GB200: kernel mode (normal or low-latency) and Torch-API vs kernel timing not stated",
    "EP-U1-ll-": "UCCL-EP's low-latency kernels issue every (token, expert) copy through CPU proxies: past the "
                 "fabric's time (the per-expert estimate) the same 1,024 copies per rank take 144, 276 and 341 us "
                 "more at EP 16, 24 and 32, a per-message proxy cost growing with the peers that no fabric term has",
}

# The low-latency (decode) kernels' entries whose platform the source leaves out, with what the test
# takes for it. pplx-garden's fabric-lib doc names neither the GPU nor the NICs; its paper (arXiv
# 2510.27656, abstract) reaches "400 Gbps on both NVIDIA ConnectX-7 and AWS EFA", one GPU's NIC
# bandwidth: DGX H100's one 400G ConnectX-7 per GPU (the harness's default) and, for EFA, the
# benchmark command's --nets-per-gpu 2 over p5en's 16 x 200G (the H200 instance). H100 and H200
# share NVLink4 and every Hopper constant of the collective model, so "H100 class" fixes the rest.
ASSUMED_GPU = {"EP-P1-pplx-efa-": "h200_sxm", "EP-P1-": "h100_sxm"}
# The decode workload pplx-garden's benchmark runs by default (the reference's reading of
# benchmarks/bench_all_to_all.py: 128 tokens per rank, hidden 7168, top-8, 256 experts), which
# EP-W1 repeats for its pplx-garden rows without restating it.
DECODE_WORKLOAD = {"tokens": 128, "hidden": 7168, "topk": 8, "dispatch_dtype": "fp8"}

# The source's own caveat: UCCL-EP's combine on p5en at EP16/24 (18-26 GB/s, a third of dispatch)
# is an implementation property, not a fabric limit (p6-b200's combine on the same fabric speed is
# about 60 GB/s). The model prices the fabric, so these rows are held only to an upper bound: the
# measured figure may exceed the model's by no more than the 20 % target (a kernel can be slower
# than its fabric, not faster).
# The same shortfall, beyond the caveat's wording: UCCL-EP's p5en combine at EP32 (43 GB/s against
# 54 dispatch; 40-42 in the replicate) and its 16-rank EFA combines in EP-W1 (p5 13.9, p5en 17.1,
# B300 59.0 against 48.7 / 60.6 / 90.0 dispatch), where DeepEP V1 on the same machines combines at
# 90-94 % of its dispatch.
IMPLEMENTATION_ARTEFACT = {
    "EP-U1-normal-p5en-ep16-combine", "EP-U1-normal-p5en-ep24-combine", "EP-U1-normal-p5en-ep32-combine",
    "EP-U2-ep16-combine", "EP-U2-ep24-combine", "EP-U2-ep32-combine",
    "EP-W1-uccl-p5-combine", "EP-W1-uccl-p5en-combine", "EP-W1-uccl-b300-combine",
}
# Outside the target, with the cause, each held to the stated band of designer / measured - 1.
# UCCL-EP's normal dispatch on p6-b200 is 53 GB/s at EP16, 24 and 32 alike, the same as on p5en
# (two 200G NICs per GPU against one 400G): the share of the counted bytes that crosses the NIC
# grows from 1/2 to 3/4 over those sizes, so the bound is on all the counted copies, own node
# included -- the CPU proxies that issue UCCL-EP's RDMA writes, not the fabric (DeepEP V1 on p5
# reaches 59.9 where UCCL-EP reaches 48.7). The model prices the fabric: an upper bound there.
UCCL_PROXY = "UCCL-EP dispatch bound by its CPU proxies (53 GB/s flat in EP size and NIC layout), not the fabric"
OUTSIDE_TARGET = {
    "EP-U1-normal-p6-b200-ep16-dispatch": (UCCL_PROXY, -0.2, 0.75),
    "EP-U1-normal-p6-b200-ep16-combine": (UCCL_PROXY + "; its combine shares the proxies", -0.2, 0.75),
    "EP-U1-normal-p6-b200-ep24-dispatch": (UCCL_PROXY, -0.2, 0.75),
    "EP-W1-uccl-p5-dispatch": (UCCL_PROXY, -0.2, 0.75),
    # The low-latency kernels (moe_per_expert_dispatch_estimate_vec): where two kernels differ on one
    # platform and workload, the one estimate (a host floor, NCCL's hop latencies, the fabric time)
    # sits with one of them
    "EP-P1-pplx-cx7-ep16-dispatch": ("pplx-garden's ConnectX-7 dispatch at EP16 runs 11 % under DeepEP's on the same "
                                     "fabric and workload (110 / 124 us); the estimate is 8 % over DeepEP's", 0.0, 0.25),
    "EP-P1-deepep-cx7-ep8-dispatch": ("DeepEP's NVLink-only dispatch (42.6 us) runs 16 % under pplx-garden's (50.5) on "
                                      "the same node and workload; the estimate is 2 % over pplx-garden's", 0.0, 0.25),
    # pplx-garden on EFA in EP-W1 (16 ranks, the decode workload assumed): a fixed part the estimate
    # does not have, from writes the CPU posts one by one (fabric-lib over libfabric)
    "EP-W1-pplx-p5-dispatch": ("pplx-garden on p5 (EFA, 4 x 100G per GPU) takes 1.8 x its p5en time (2 x 200G) for the "
                               "same 400G per GPU; the estimate has one EFA latency class (aws-ofi-nccl's) and no "
                               "per-message cost", -0.6, -0.4),
    "EP-W1-pplx-p5-combine": ("pplx-garden on p5: 2.1 x its p5en combine time on the same bandwidth per GPU", -0.6, -0.4),
    "EP-W1-pplx-b300-dispatch": ("pplx-garden on B300 takes 140 and 149 us for dispatch and combine copies of 7.4 and "
                                 "14.3 KB: about 130 us fixed where the estimate has 57 (the Blackwell host floor, "
                                 "the EFA path, NCCL's hops)", -0.35, -0.2),
}
# Hybrid-EP's Torch-API figures include the Python API around the kernel; the source gives the
# gap to the kernel-only figure as 20-40 %. The model prices the kernel, so Torch-API rows are held
# to the kernel band widened by that gap: measured within [designer / 1.4 - 20 %, designer + 20 %].
TORCH_API_GAP = 0.40
# The rows the Hopper and Blackwell forwarder rates were derived from; reproduced by construction.
SETS_CONSTANT = {"EP-W1-deepepv1-p5en-dispatch", "EP-W1-deepepv1-b300-dispatch"}


def _entries() -> dict:
    return {k: v for k, v in curves().items() if k.startswith("EP-")}


def _reason_not_modelled(name: str) -> str | None:
    for prefix, why in NOT_MODELLED.items():
        if name.startswith(prefix):
            return why
    return None


def _system(e: dict) -> ClusterSystem:
    """The entry's platform: GPUs per node on one HB domain (the ranks inside the NVL72 domain for
    MNNVL), the stated NICs per GPU and speed (else the harness's DGX reference 400G, which is also
    p5en's 2 x 200G for EP-U2's replicate), a rail leaf and a cross-rail spine; EFA paths carry their
    endpoint latency on the leaf."""
    gpu = load_catalog().gpu(e["gpu"])
    g = int(e["gpus_per_node"])
    p = int(e["ep_size"])
    if e.get("nics_per_node") and e.get("nic_gbps"):
        per_gpu_gbps = e["nics_per_node"] * e["nic_gbps"] / g
    else:
        per_gpu_gbps = DEFAULT_NIC_GBPS_PER_GPU
    nic = units.gbps_to_bytes_per_s(per_gpu_gbps)
    n_dom = max(p // g, 1)
    efa = e["fabric"] == "efa"
    leaf_lat = {"latency_s": EFA_LATENCY_S[e["gpu"]]} if efa else {}
    spine_lat = {"latency_s": 0.0} if efa else {}
    tiers = (NetworkTier(name="leaf", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic,
                         **leaf_lat),
             NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic,
                         **spine_lat))
    hb = HBDomain(size=g, bandwidth_per_gpu_bytes_per_s=gpu.hb_gb_per_s_per_direction * 1e9)
    return ClusterSystem(gpu=gpu.perf(), n_gpus=max(p, g), hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers)


@dataclass(frozen=True)
class Priced:
    name: str
    quantity: str  # "algbw_gbps" or "time_us"
    measured: float | None
    measured_min: float | None
    measured_max: float | None
    designer: float
    bound: str  # "target", "artefact", "torch_api"


def _dtype_bytes(e: dict) -> float:
    if e["op"] == "moe_combine":
        return BF16  # every source combines in BF16
    return FP8 if e.get("dispatch_dtype") == "fp8" else BF16


def _price_per_expert(name: str, e: dict) -> tuple[float, float]:
    """A low-latency (decode) kernel's entry: (model time s, one copy's bytes x copies per rank)."""
    w = {k: e.get(k) or DECODE_WORKLOAD[k] for k in ("tokens", "hidden", "topk")}
    gpu = e["gpu"] or next(v for k, v in ASSUMED_GPU.items() if name.startswith(k))
    p, g = int(e["ep_size"]), int(e["gpus_per_node"])
    sy = _system({**e, "gpu": gpu})
    fp8 = e["op"] == "moe_dispatch" and (e.get("dispatch_dtype") or DECODE_WORKLOAD["dispatch_dtype"]) == "fp8"
    cb = coll.low_latency_copy_bytes(w["hidden"], fp8)
    est = coll.moe_per_expert_dispatch_estimate_vec(cb, w["tokens"] * w["topk"], p, min(g, p), max(p // g, 1), sy, CAL)
    return float(est.time_s), w["tokens"] * w["topk"] * cb


def _price(name: str, e: dict) -> Priced:
    bound = ("artefact" if name in IMPLEMENTATION_ARTEFACT else "outside" if name in OUTSIDE_TARGET
             else "torch_api" if e.get("measurement") == "torch" else "target")
    vals = e.get("values")
    measured = (float(vals[0]) if vals else None, float(e["values_min"][0]) if e.get("values_min") else None,
                float(e["values_max"][0]) if e.get("values_max") else None)
    if e.get("mode") in ("decode", "low_latency"):
        t, moved = _price_per_expert(name, e)
        # test_low_latency.py's bandwidth: every copy's bytes over the kernel time
        designer = t * 1e6 if e["quantity"] == "time_us" else moved / t / 1e9
        return Priced(name, e["quantity"], *measured, designer, bound)
    w = {k: e.get(k) or DEFAULT_WORKLOAD[k] for k in DEFAULT_WORKLOAD}
    p, g = int(e["ep_size"]), int(e["gpus_per_node"])
    n_dom = max(p // g, 1)
    experts = e.get("experts") or (e["experts_per_rank"] * p if e.get("experts_per_rank") else (256 // p) * p)
    # node-limited routing as the DeepEP/UCCL benchmarks set it; Hybrid-EP's is not stated: uniform
    max_nodes = None if e["kernel"] == "hybrid_ep" else MAX_NODES_PER_TOKEN
    sy = _system(e)
    token_bytes = w["tokens"] * w["hidden"] * _dtype_bytes(e)
    d = float(coll.expected_distinct_domains(experts, w["topk"], n_dom, max_nodes))
    ranks = coll.expected_distinct_ranks(experts, w["topk"], n_dom, min(g, p), max_nodes)
    est = coll.moe_dispatch_estimate_vec(token_bytes, ranks, d, p, min(g, p), n_dom, sy, CAL)
    t = float(est.time_s)
    if e["quantity"] == "time_us":
        designer = t * 1e6
    elif n_dom > 1:
        # DeepEP's test_internode.py: RDMA bytes = tokens sent to the distinct nodes of their experts,
        # own node included, x hidden x bytes, over the kernel time
        designer = token_bytes * d / t / 1e9
    else:
        # test_intranode.py: NVLink bytes = the tokens a rank receives (one copy per destination rank,
        # its own included) x hidden x bytes; per rank, tokens x the expected distinct ranks per token
        designer = token_bytes * ranks / t / 1e9
    return Priced(name, e["quantity"], *measured, designer, bound)


@cache
def _priced() -> tuple[list[Priced], list[tuple[str, str]]]:
    rows, skipped = [], []
    for name, e in _entries().items():
        why = _reason_not_modelled(name)
        if why:
            skipped.append((name, why))
        else:
            rows.append(_price(name, e))
    return rows, skipped


def _error(r: Priced) -> float:
    """Model over measured, minus one; against a published range, the distance to its nearer end."""
    if r.measured is not None:
        return r.designer / r.measured - 1
    if r.measured_min <= r.designer <= r.measured_max:
        return 0.0
    ref = r.measured_min if r.designer < r.measured_min else r.measured_max
    return r.designer / ref - 1


def test_every_entry_priced_or_listed_as_not_modelled():
    rows, skipped = _priced()
    print(f"\n{'entry':<42} {'qty':>5} {'measured':>12} {'designer':>9} {'error':>7}  bound")
    for r in rows:
        m = f"{r.measured:g}" if r.measured is not None else f"{r.measured_min:g}-{r.measured_max:g}"
        unit = "GB/s" if r.quantity == "algbw_gbps" else "us"
        print(f"{r.name:<42} {unit:>5} {m:>12} {r.designer:9.1f} {_error(r):+7.0%}  {r.bound}")
    print("not modelled:")
    for name, why in skipped:
        print(f"  {name}: {why}")
    print(f"set the forwarder rates (collectives.yaml moe_forwarder_bytes_per_s), not independent checks: "
          f"{', '.join(sorted(SETS_CONSTANT))}")
    assert len(rows) + len(skipped) == len(_entries())
    assert {r.name for r in rows} >= IMPLEMENTATION_ARTEFACT | set(OUTSIDE_TARGET)
    within = [r for r in rows if r.bound == "target"]
    print(f"{len(within)} entries held to the {TOL:.0%} target, {len(rows) - len(within)} to a stated bound, "
          f"{len(skipped)} not modelled")


@pytest.mark.parametrize("name", [r.name for r in _priced()[0]])
def test_entry(name):
    r = next(x for x in _priced()[0] if x.name == name)
    err = _error(r)
    if r.bound == "target":
        assert abs(err) <= TOL, f"{name}: designer {r.designer:.1f} vs measured, {err:+.0%}"
    elif r.bound == "artefact":
        # an implementation below its fabric: the measured figure may not exceed the model's by more than TOL
        assert err >= 1 / (1 + TOL) - 1, f"{name}: {err:+.0%}"
    elif r.bound == "torch_api":
        # kernel-only model against the end-to-end API figure: measured in [designer/1.4 - 20 %, designer + 20 %]
        lo = r.designer / (1 + TORCH_API_GAP) * (1 - TOL)
        assert lo <= r.measured <= r.designer * (1 + TOL), f"{name}: {err:+.0%}"
    else:
        why, lo, hi = OUTSIDE_TARGET[name]
        assert lo <= err <= hi, f"{name} ({why}): {err:+.0%}"


def test_forwarder_rate_by_hand():
    # 2 x 8 H100 with NICs fast enough not to bind (4 x 400G per GPU), 256 experts, top-8: a token
    # reaches R = 16 (1 - C(240, 8) / C(256, 8)) distinct ranks of the 16, and the NVLink forwarders
    # move the R (g-1)/g copies of a rank's tokens bound for ranks other than themselves at the Hopper
    # forwarder rate, 179 GB/s (collectives.yaml moe_forwarder_bytes_per_s). Doubling the bytes adds
    # R x 7/8 x token_bytes / 179e9 (the latency cancels).
    from math import comb

    r = 16 * (1 - comb(240, 8) / comb(256, 8))
    assert coll.expected_distinct_ranks(256, 8, 2, 8, 4) == pytest.approx(r, rel=1e-12)
    e = {"gpu": "h100_sxm", "gpus_per_node": 8, "ep_size": 16, "nics_per_node": 32, "nic_gbps": 400,
         "fabric": "infiniband"}
    sy = _system(e)
    d = float(coll.expected_distinct_domains(256, 8, 2, 4))
    tb = 4096 * 7168 * 2.0
    t1, t2 = (float(coll.moe_dispatch_estimate_vec(x, r, d, 16, 8, 2, sy, CAL).time_s) for x in (tb, 2 * tb))
    assert t2 - t1 == pytest.approx(r * 7 / 8 * tb / 179e9, rel=1e-9)
    # one node: the forwarders are the intranode kernel's whole SM budget, no cap -- the copies reach
    # 0.62 of NVLink4's 450 GB/s (collectives.yaml moe_dispatch_hb_efficiency). 256 experts on 8
    # ranks: R = 8 (1 - C(224, 8) / C(256, 8)), R x 7/8 copies / (450e9 x 0.62)
    r1 = 8 * (1 - comb(224, 8) / comb(256, 8))
    assert coll.expected_distinct_ranks(256, 8, 1, 8) == pytest.approx(r1, rel=1e-12)
    one = _system({**e, "ep_size": 8})
    s1, s2 = (float(coll.moe_dispatch_estimate_vec(x, r1, 1.0, 8, 8, 1, one, CAL).time_s) for x in (tb, 2 * tb))
    assert s2 - s1 == pytest.approx(r1 * 7 / 8 * tb / (450e9 * 0.62), rel=1e-9)


def test_per_expert_dispatch_by_hand():
    # 2 x 8 H100, one 400G NIC per GPU, a rail leaf and a cross-rail spine (2 us each): 128 tokens x
    # top-8 = 1,024 copies of one FP8 token (7,168 + 224 + 16 bytes) spread over 16 ranks. Half go to
    # the other node over RDMA at the NIC's efficiency, 7/16 over NVLink at NCCL's usable 20.6 of
    # 25 GB/s per link; the fixed part is the Hopper host floor, NCCL's NVLink and NET Simple hops.
    e = {"gpu": "h100_sxm", "gpus_per_node": 8, "ep_size": 16, "fabric": "infiniband"}
    sy = _system(e)
    cb = 7168 + 7168 / 128 * 4 + 16
    assert coll.low_latency_copy_bytes(7168, fp8=True) == pytest.approx(cb)
    assert coll.low_latency_copy_bytes(7168, fp8=False) == 2 * 7168
    rdma = cb * 1024 * 8 / 16
    nvlink = cb * 1024 * 7 / 16
    fixed = 30.3e-6 + 3.4e-6 + 14.0e-6
    want = fixed + max(rdma / (CAL.nic_efficiency * 400e9 / 8), nvlink / (450e9 * 20.6 / 25))
    est = coll.moe_per_expert_dispatch_estimate_vec(cb, 1024, 16, 8, 2, sy, CAL)
    assert float(est.time_s) == pytest.approx(want, rel=1e-9)
    assert float(est.hb_bytes) == pytest.approx(nvlink) and float(est.rail_bytes + est.spine_bytes) == pytest.approx(rdma)
    assert coll.ALGORITHMS[int(est.algorithm_index)] == "per_expert_dispatch"
    assert float(coll.peers_per_rank(est.algorithm_index, 16, 8, sy)) == 15
    # every copy leaves its rail: a rail-only network (no cross-rail tier) cannot carry them, where
    # the deduplicating kernels, whose RDMA stays on the rail, run
    rail_only = sy.model_copy(update={"tiers": sy.tiers[:1]})
    assert np.isinf(float(coll.moe_per_expert_dispatch_estimate_vec(cb, 1024, 16, 8, 2, rail_only, CAL).time_s))
    d = float(coll.expected_distinct_domains(256, 8, 2, 4))
    assert np.isfinite(float(coll.moe_dispatch_estimate_vec(128 * cb, 8, d, 16, 8, 2, rail_only, CAL).time_s))
