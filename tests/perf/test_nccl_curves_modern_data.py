"""The modern measured collective curves (tests/perf/data/nccl_curves_modern.yaml, transcribed from
../shared/reference/collectives-modern.md) are well-formed, and a few values match the reference.

Checks are on the data only: every entry has the required fields with allowed values, sizes/values line up, the
rank count multiplies out, and hand-picked numbers read off the markdown equal the YAML."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data" / "nccl_curves_modern.yaml"
TEXT = DATA.read_text(encoding="utf-8")
DOC = yaml.safe_load(TEXT)
IDS = list(DOC)

REQUIRED = ["description", "source", "op", "gpu", "nodes", "gpus_per_node", "ranks", "hb_domain", "fabric",
            "nics_per_node", "nic_gbps", "nccl_version", "algorithm", "protocol", "quantity", "size_convention",
            "sizes", "values", "notes"]
MOE_REQUIRED = ["kernel", "ep_size", "tokens", "hidden", "topk", "experts", "dispatch_dtype", "combine_dtype",
                "bandwidth_link", "bandwidth_quantity"]
OPS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast", "reduce", "moe_dispatch",
       "moe_combine"}
MOE_OPS = {"moe_dispatch", "moe_combine"}
GPUS = {"h100_sxm", "h200_sxm", "b200", "gb200", "b300", "a100_80gb"}
FABRICS = {"nvlink_only", "infiniband", "efa", "roce", "mnnvl"}
QUANTITIES = {"busbw_gbps", "algbw_gbps", "time_us"}
ALGORITHMS = {None, "ring", "tree", "nvls", "nvlstree", "pat", "collnet", "default"}
KERNELS = {"deepep", "deepep_normal", "deepep_low_latency", "deepep_v2_gdaki", "uccl_ep", "pplx_garden", "hybrid_ep"}
DTYPES = {None, "fp8", "bf16"}
PARALLEL_LISTS = ["algbw_gbps", "busbw_gbps", "inplace_time_us", "inplace_busbw_gbps", "time_us", "size_labels"]
# every curve id of the reference's index (§1-§7) has at least one entry whose id starts with it
REFERENCE_IDS = ["X-H1", "X-H2", "X-H3", "X-H4", "X-H5", "X-H6", "X-B1", "X-B2", "X-B3", "X-B4", "X-B5", "X-B6",
                 "X-G1", "X-G2", "X-G3", "X-G4", "X-G5", "X-G6", "TG-H2", "SB-B2", "CW-G1", "CW-G2", "XR-1", "XR-2",
                 "XR-3", "XR-4", "XR-5", "CW-B", "TB-5", "TB-1", "TB-2", "TB-6", "AWS-1", "AWS-3", "SB-H2", "B300-1",
                 "EP-U1", "EP-U2", "EP-P1", "EP-H1", "EP-H2", "EP-H3", "EP-W1", "EP-A1"]


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def test_ids_unique_and_cover_the_reference():
    top = re.findall(r"^([A-Za-z0-9][^:\s]*):", TEXT, flags=re.M)
    assert len(top) == len(set(top)) == len(IDS), [i for i in top if top.count(i) > 1]
    for rid in REFERENCE_IDS:
        assert any(i == rid or i.startswith(rid + "-") for i in IDS), rid


@pytest.mark.parametrize("eid", IDS)
def test_entry_is_well_formed(eid):
    e = DOC[eid]
    for k in REQUIRED:
        assert k in e, (eid, k)
    assert isinstance(e["description"], str) and e["description"]
    assert isinstance(e["source"], str) and e["source"]
    assert isinstance(e["notes"], str) and e["notes"]
    assert e["op"] in OPS, e["op"]
    assert e["fabric"] in FABRICS, e["fabric"]
    assert e["quantity"] in QUANTITIES, e["quantity"]
    assert e["algorithm"] in ALGORITHMS, e["algorithm"]
    assert e["gpu"] in GPUS or (e["gpu"] is None and e["op"] in MOE_OPS), e["gpu"]
    assert e["nccl_version"] is None or re.fullmatch(r"2\.\d+\.\d+", e["nccl_version"])
    for k in ("nodes", "gpus_per_node", "ranks", "hb_domain", "nics_per_node", "nic_gbps"):
        assert e[k] is None or (isinstance(e[k], int) and e[k] > 0), (k, e[k])
    assert e["hb_domain"] in (8, 72)
    if e["nodes"] is not None and e["gpus_per_node"] is not None:
        assert e["ranks"] == e["nodes"] * e["gpus_per_node"]
    if e["gpus_per_node"] is not None:
        assert e["gpus_per_node"] <= e["hb_domain"]
    if e["fabric"] in ("nvlink_only", "mnnvl"):
        assert e["nodes"] == 1
    if "groups" in e:
        assert e["groups"] * e["group_size"] == e["ranks"]

    values = e["values"]
    if values is None:  # published only as a range over runs
        lo, hi = e["values_min"], e["values_max"]
        assert len(lo) == len(hi) >= 1
        assert all(_is_num(a) and _is_num(b) and 0 < a <= b for a, b in zip(lo, hi))
        n = len(lo)
    else:
        assert isinstance(values, list) and values
        assert all(_is_num(v) and v > 0 for v in values), values
        n = len(values)

    if e["op"] in MOE_OPS:
        for k in MOE_REQUIRED:
            assert k in e, (eid, k)
        assert e["kernel"] in KERNELS
        assert e["ep_size"] == e["ranks"]
        assert e["dispatch_dtype"] in DTYPES and e["combine_dtype"] in DTYPES
        assert e["bandwidth_link"] in (None, "nvlink", "rdma")
        assert e["sizes"] is None and n == 1
        if e["quantity"] == "algbw_gbps":
            assert e["bandwidth_quantity"]
    else:
        sizes = e["sizes"]
        assert isinstance(sizes, list) and len(sizes) == n
        assert all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes), sizes
        assert all(a < b for a, b in zip(sizes, sizes[1:])), sizes
    for k in PARALLEL_LISTS:
        if k in e:
            assert len(e[k]) == n, (eid, k)
            if k != "size_labels":
                assert all(_is_num(v) and v >= 0 for v in e[k])  # nccl-tests prints busbw 0.00 at tiny sizes


def _at(eid, size, key="values"):
    e = DOC[eid]
    return e[key][e["sizes"].index(size)]


def test_spot_checks_against_the_markdown():
    # X-H1: 1073741824 B -> 393268230936 B/s published
    assert _at("X-H1", 1073741824) == 393.268230936
    assert DOC["X-H1"]["quantity"] == "algbw_gbps" and DOC["X-H1"]["ranks"] == 8
    # X-G1: 18 GiB -> 461190000000 B/s; the 288 B row (throughput 0) is left out
    assert _at("X-G1", 19327352832) == 461.19 and 288 not in DOC["X-G1"]["sizes"]
    # XR-2 allgather, 17179868160 B: 52391.3 us, busbw 323.82
    assert _at("XR-2", 17179868160) == 52391.3
    assert _at("XR-2", 17179868160, "busbw_gbps") == 323.82
    assert DOC["XR-2"]["ranks"] == 80
    # AWS-1, 8 B: 69.12 us; 8589934592 B: 33605 us, busbw 479.28, in-place busbw 478.95
    assert _at("AWS-1", 8) == 69.12
    assert _at("AWS-1", 8589934592) == 33605
    assert _at("AWS-1", 8589934592, "busbw_gbps") == 479.28
    assert _at("AWS-1", 8589934592, "inplace_busbw_gbps") == 478.95
    assert len(DOC["AWS-1"]["sizes"]) == 32 and len(DOC["AWS-3"]["sizes"]) == 29
    # CW-G1, 4294967296 B: oop 10094 us, busbw 839.16; ip busbw 835.32
    assert _at("CW-G1", 4294967296) == 10094
    assert _at("CW-G1", 4294967296, "busbw_gbps") == 839.16
    assert _at("CW-G1", 4294967296, "inplace_busbw_gbps") == 835.32
    # EP-U1 p5en EP16 normal: dispatch 50 GB/s (RDMA), 1196 us; combine 18 GB/s, 6379 us
    d = DOC["EP-U1-normal-p5en-ep16-dispatch"]
    assert d["values"] == [50] and d["time_us"] == [1196] and d["bandwidth_link"] == "rdma"
    c = DOC["EP-U1-normal-p5en-ep16-combine"]
    assert c["values"] == [18] and c["time_us"] == [6379]
    # TG-H2, 8589934592 B: oop 20753.7 us, busbw 362.16
    assert _at("TG-H2", 8589934592) == 20753.7 and _at("TG-H2", 8589934592, "busbw_gbps") == 362.16
    # TB-1 AR CollNet SHARP at 8 nodes: 547.9; TB-5 AR Ring at 64 nodes @2/4/8 GB: 222.9 / 269.2 / 288.1
    assert DOC["TB-1-AR-collnet-8n"]["values"] == [547.9]
    assert DOC["TB-5-AR-ring-64n"]["values"] == [222.9, 269.2, 288.1]
    # EP-H3, 24 ranks, Hybrid-EP combine 483.76
    assert DOC["EP-H3-r24-hybrid-torch-combine"]["values"] == [483.76]
