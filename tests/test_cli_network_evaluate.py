"""`designer network` and `designer evaluate` from the command line: outputs and one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "studies" / "scenarios" / "gpt-145b-selene.yaml"
NETWORK_STUDY = ROOT / "studies" / "network_declarative_budget.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "designer.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_evaluate_json_has_the_documented_keys():
    out = run_cli("evaluate", str(SCENARIO), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("iteration_time_s", "time_to_train_s", "mfu", "memory_per_gpu_bytes", "fits_in_memory", "breakdown"):
        assert key in data
    # time-to-train = iteration time x total tokens / tokens per iteration (2304 x 2048)
    assert data["time_to_train_s"] == pytest.approx(data["iteration_time_s"] * 300e9 / (2304 * 2048), rel=1e-9)
    assert 0 < data["mfu"] < 1
    for part in ("compute_s", "tp_s", "pp_s", "dp_s", "bubble_s"):
        assert part in data["breakdown"]


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "input.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda d: d["strategy"].update(colour="red"), "unknown key"),
        (lambda d: d["strategy"].update(tp=0), "strategy.tp"),
        (lambda d: d["system"].update(n_gpus=1537), "GPUs used per HB domain"),
        (lambda d: d.update(model="gpt-9t"), "available:"),
        (lambda d: d["strategy"].update(dp=12), "must equal system.n_gpus"),
    ],
)
def test_evaluate_bad_input_is_one_line(tmp_path, edit, needle):
    data = yaml.safe_load(SCENARIO.read_text())
    edit(data)
    assert needle in one_error_line(run_cli("evaluate", str(_write(tmp_path, data))))


def test_network_writes_csv_and_reports_budget_slack(tmp_path):
    out = run_cli("network", str(NETWORK_STUDY), "--json", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    design = data["designs"][0]
    # With at most 150,000 optics for 32,768 GPUs only a two-tier fabric fits: 2 link layers x 2 ends
    # x 32,768 = 131,072 transceivers (railonly.md §2 counting), so the slack is 18,928.
    assert design["transceiver_count"] == 131072
    slack = data["budget_slacks"][0][0]
    assert slack["slack"] == pytest.approx(150000 - 131072)
    assert (tmp_path / "designs.csv").read_text().count("\n") == 2


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda d: d.update(colour="red"), "unknown key"),
        (lambda d: d["budgets"]["declared"][0].update(rhs=-5), "rhs"),
        (lambda d: d["gpus"].update(count=32769), "32769"),
        (lambda d: d["choices"].update(switches=[{"id": "nope"}]), "nope"),
    ],
)
def test_network_bad_input_is_one_line(tmp_path, edit, needle):
    data = yaml.safe_load(NETWORK_STUDY.read_text())
    edit(data)
    assert needle in one_error_line(run_cli("network", str(_write(tmp_path, data))))


def test_network_infeasible_budget_names_the_budget_and_shortfall(tmp_path):
    data = yaml.safe_load(NETWORK_STUDY.read_text())
    data["budgets"]["declared"][0]["rhs"] = 100000  # below the 2-tier minimum of 131,072
    line = one_error_line(run_cli("network", str(_write(tmp_path, data))))
    assert "optics" in line
    assert "31,072" in line or "31072" in line


def test_network_reads_the_network_section_of_a_full_study(tmp_path):
    # gpt1t_fabrics' frontier fixes the GPU count at 1024, 2048, 4096 and 8192 (min cost each); the
    # quickstart's range [256, 2048] at min cost is its smallest count.
    out = run_cli("network", str(ROOT / "studies" / "gpt1t_fabrics" / "study.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [d["n_gpus"] for d in data["designs"]] == [1024, 2048, 4096, 8192]
    out = run_cli("network", str(ROOT / "studies" / "quickstart" / "study.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    assert [d["n_gpus"] for d in json.loads(out.stdout)["designs"]] == [256]


def test_evaluate_lists_every_defaulted_field():
    # the Selene scenario sets the attention kernel but not the fp8 recipe, the rank order, CP or
    # gpus_per_domain: those are listed with the value they took, the HB domain's the DGX A100's
    # (8 GPUs on NVSwitch, 300 GB/s per direction: the catalog's platform and GPU)
    out = run_cli("evaluate", str(SCENARIO), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    d = data["defaulted"]
    assert d["training.fp8_recipe"] == "delayed" and d["strategy.rank_order"] == "tp-cp-dp-pp"
    assert d["strategy.cp"] == 1 and d["system.gpus_per_domain"] == 8
    assert d["system.hb_gb_per_s_per_direction"] == 300 and d["system.hb_topology"] == "switched"
    assert "strategy.attention_kernel" not in d and "strategy.tp" not in d


def test_evaluate_lists_the_router_load_an_moe_scenario_took(tmp_path):
    # an MoE scenario that states no routing balance is priced with a learned router, at the shipped
    # calibration's busiest-rank load (read here from the data file); stated forced, at the mean
    from designer.perf.model import load_perf_calibration

    load = load_perf_calibration().compute.learned_busiest_rank_load
    data = {"model": "qwen3-30b-a3b",
            "training": {"sequence_length": 4096, "global_batch_sequences": 256, "total_tokens": 1.0e12},
            "strategy": {"dp": 64, "ep": 8, "recompute": "full"},
            "system": {"platform": "hgx_h100_8", "n_gpus": 64, "family": "rail-optimized"}}
    got = {}
    for balance in (None, "forced"):
        d = {**data, "training": {**data["training"], **({"moe_load_balance": balance} if balance else {})}}
        out = run_cli("evaluate", str(_write(tmp_path, d)), "--json")
        assert out.returncode == 0, out.stderr
        got[balance] = json.loads(out.stdout)
    assert got[None]["defaulted"]["training.moe_load_balance"] == "learned"
    assert got[None]["defaulted"]["training.moe_busiest_rank_load"] == pytest.approx(load)
    assert "training.moe_load_balance" not in got["forced"]["defaulted"]
    assert got["forced"]["defaulted"]["training.moe_busiest_rank_load"] == 1.0
    assert got[None]["iteration_time_s"] > got["forced"]["iteration_time_s"]


def test_the_kimi_k2_scenario_keeps_each_expert_group_in_one_nvlink_domain():
    # 64 GPUs of each GB300 NVL72 rack, EP 64 with TP 1, ranks in Megatron's order (tp, cp, dp, pp):
    # each pipeline stage's 64 ranks fill one rack, so every all-to-all and every data-parallel
    # collective stays on NVLink, and the pipeline's sends alone cross the racks, on the rails
    out = run_cli("evaluate", str(ROOT / "studies" / "scenarios" / "kimi-k2-gb300.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)
    assert m["feasible"] and m["fits_in_memory"]
    assert m["type_ep_hb_bytes"] > 0 and m["type_ep_rail_bytes"] == m["type_ep_spine_bytes"] == 0
    assert m["type_dp_rail_bytes"] == m["type_dp_spine_bytes"] == 0
    assert m["type_pp_hb_bytes"] == 0 and m["type_pp_rail_bytes"] > 0


def test_the_64_gpu_rack_platform_is_the_rack_with_gpus_per_domain_64(tmp_path):
    # gb300_nvl72_64 is gb300_nvl72 run on 64 GPUs of each rack: the Kimi K2 scenario (which states
    # gpus_per_domain 64 on gb300_nvl72) prices the same on it, to the last digit
    data = yaml.safe_load((ROOT / "studies" / "scenarios" / "kimi-k2-gb300.yaml").read_text())
    stated = json.loads(run_cli("evaluate", str(_write(tmp_path, data)), "--json").stdout)
    system = {k: v for k, v in data["system"].items() if k != "gpus_per_domain"}
    variant = json.loads(run_cli("evaluate", str(_write(tmp_path, {**data, "system": {**system, "platform": "gb300_nvl72_64"}})),
                                 "--json").stdout)
    assert variant["iteration_time_s"] == stated["iteration_time_s"]
    assert variant["memory_per_gpu_bytes"] == stated["memory_per_gpu_bytes"]


def test_evaluate_notes_an_expert_group_split_across_two_racks(tmp_path):
    # EP 16 in consecutive ranks on racks of 72 GPUs: ranks 64-79 form a group with 8 GPUs in each of
    # two racks (72 is not a multiple of 16), so its all-to-all leaves NVLink; the largest multiple of
    # 16 in a rack of 72 is 64, the GPUs per rack that keep every group in one
    data = {"model": "deepseek-v3",
            "training": {"sequence_length": 4096, "global_batch_sequences": 1152, "total_tokens": 1.0e12,
                         "precision": "mxfp8"},
            "strategy": {"dp": 144, "ep": 16, "recompute": "full"},
            "system": {"platform": "gb200_nvl72", "n_gpus": 144, "family": "rail-optimized"}}
    out = run_cli("evaluate", str(_write(tmp_path, data)), "--json")
    note = json.loads(out.stdout)["notes"]["strategy.ep"]
    assert "a group of 16 over 16 consecutive ranks is cut by a boundary of the HB domains of 72 GPUs (8 on one side)" in note
    assert "system.gpus_per_domain: 64" in note
    # at 64 GPUs of each rack no group is split and there is nothing to note
    kept = {**data, "training": {**data["training"], "global_batch_sequences": 1024},
            "strategy": {**data["strategy"], "dp": 128},
            "system": {**data["system"], "n_gpus": 128, "gpus_per_domain": 64}}
    out = run_cli("evaluate", str(_write(tmp_path, kept)), "--json")
    assert json.loads(out.stdout)["notes"] == {}
    # groups spread over domains by their stride are laid out as asked, not cut: CP 4 over TP 4 spans
    # 16 ranks, two 8-GPU nodes by design; Mixtral's EP 8 over expert TP 8 one GPU in each of 8 nodes
    for model, strategy in (("llama3-70b", {"tp": 4, "cp": 4, "dp": 8, "zero_stage": 3}),
                            ("mixtral-8x7b", {"tp": 8, "dp": 16, "ep": 8})):
        d = {"model": model, "training": {"sequence_length": 4096, "global_batch_sequences": 256, "total_tokens": 1.0e12},
             "strategy": {**strategy, "sequence_parallel": True, "recompute": "full"},
             "system": {"platform": "hgx_h100_8", "n_gpus": 128, "family": "rail-optimized"}}
        assert json.loads(run_cli("evaluate", str(_write(tmp_path, d)), "--json").stdout)["notes"] == {}, model


def test_a_scenario_runs_with_the_nccl_release_it_states(tmp_path):
    # The Selene scenario moved to H100 nodes with 400G NICs: its pipeline sends cross nodes. Before
    # NCCL 2.29 a network send/recv peer gets two p2p channels (paths.cc ncclTopoGetNchannels); from 2.29
    # one per 14 GB/s of NIC (four on 400G), so the pipeline's share of the step shrinks at 2.29 and the
    # shipped release (2.30) prices it as 2.29 does.
    data = yaml.safe_load(SCENARIO.read_text())
    data["system"].update(platform="hgx_h100_8", nic="cx7_400g", switch="qm9790")
    data["training"]["precision"] = "bf16"
    data["strategy"]["attention_kernel"] = "flash"
    pp_s = {}
    for version in (None, "2.28", "2.29"):
        out = run_cli("evaluate", str(_write(tmp_path, {**data, **({"nccl_version": version} if version else {})})), "--json")
        assert out.returncode == 0, out.stderr
        pp_s[version] = json.loads(out.stdout)["breakdown"]["pp_s"]
    assert pp_s["2.28"] > 1.1 * pp_s["2.29"] and pp_s[None] == pp_s["2.29"]
    line = one_error_line(run_cli("evaluate", str(_write(tmp_path, {**data, "nccl_version": "3.1"})), "--json"))
    assert "nccl_version" in line and "3.1" in line


@pytest.mark.parametrize(
    "edit, needles",
    [
        # Transformer Engine refuses FP8 before Hopper: the run cannot be stated on A100s
        (lambda d: d["training"].update(precision="fp8"), ("precision fp8 does not run on a100", "bf16, fp16")),
        # a cross-field rule of a section names its fields, without the section's whole mapping
        (lambda d: d["strategy"].update(recompute="none", recompute_modules=["mlp"]),
         ("strategy: recompute_modules needs recompute 'selective'",)),
        # a YAML number loses the release's trailing zero (2.20 reads as 2.2)
        (lambda d: d.update(nccl_version=2.2), ("nccl_version", "in quotes")),
    ],
)
def test_evaluate_refuses_what_the_run_cannot_be(tmp_path, edit, needles):
    data = yaml.safe_load(SCENARIO.read_text())
    edit(data)
    line = one_error_line(run_cli("evaluate", str(_write(tmp_path, data))))
    assert all(n in line for n in needles), line
    assert "{'tp'" not in line


def test_several_unknown_keys_list_the_allowed_keys_once(tmp_path):
    data = yaml.safe_load(SCENARIO.read_text())
    data["strategy"].update(colour="red", flavour="mint", size="xl")
    line = one_error_line(run_cli("evaluate", str(_write(tmp_path, data))))
    assert line.count("unknown key") == 3 and line.count("allowed:") == 1


def test_a_batch_tolerance_runs_the_nearest_batch_the_strategy_splits(tmp_path):
    # Selene's dp 24 x microbatch 1 under the interleaved schedule over pp 8: batches that are
    # multiples of 24 whose 1/24 is a multiple of 8, i.e. multiples of 192. A target of 2300 (+-1%,
    # 2277..2323) has one: 2304 = 12 x 192; exactly 2300 does not split.
    data = yaml.safe_load(SCENARIO.read_text())
    data["training"]["global_batch_sequences"] = {"target": 2300, "tolerance": 0.01}
    out = run_cli("evaluate", str(_write(tmp_path, data)), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["defaulted"]["strategy.global_batch_sequences"] == 2304
    exact = run_cli("evaluate", str(SCENARIO), "--json")
    # the same batch as the published run: the same iteration
    assert got["iteration_time_s"] == pytest.approx(json.loads(exact.stdout)["iteration_time_s"], rel=1e-12)
    data["training"]["global_batch_sequences"] = 2300
    assert "not a multiple of dp 24" in one_error_line(run_cli("evaluate", str(_write(tmp_path, data))))


def test_a_patch_release_prices_as_its_minor(tmp_path):
    data = yaml.safe_load(SCENARIO.read_text())
    outs = [run_cli("evaluate", str(_write(tmp_path, {**data, "nccl_version": v})), "--json") for v in ("2.21.5", "2.21")]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr
    assert json.loads(outs[0].stdout)["iteration_time_s"] == json.loads(outs[1].stdout)["iteration_time_s"]
    assert json.loads(outs[0].stdout).get("defaulted", {}).get("nccl_version") is None  # it was stated
