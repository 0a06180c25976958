"""Write the validation tables of the performance model: every calibration row, measured vs designer.

    python studies/calibration/validation_tables.py [--out results/validation/modern_runs.md]

It also writes heldout_runs.md and mlperf_heldout.md beside it: the same tables for the held-out rows
(tests/perf/data/megatron_bridge_heldout.yaml and mlperf_heldout.yaml), which no fit reads.

One markdown table per set of training-runs-modern.md (and Megatron SC'21 Table 1), with the
assumptions designer made for the row (system, defaults, the recompute it chose where the source is
silent). The README's validation section summarises them and shows the same tables, one collapsed
section per set, between the README_START and README_END markers (rewritten here;
tests/perf/test_modern_runs.py checks they hold the shipped calibration's figures).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from designer.perf.iteration import attention_output_saved_once  # noqa: E402
from designer.perf.model import load_perf_calibration  # noqa: E402
from tests.perf import modern_runs  # noqa: E402
from tests.perf.test_training_runs import megatron_errors  # noqa: E402

OUT = REPO / "results" / "validation" / "modern_runs.md"
README = REPO / "README.md"
README_START = "<!-- validation tables: written by studies/calibration/validation_tables.py -->"
README_END = "<!-- end of validation tables -->"


def assumptions(row: dict, st, calib) -> str:
    training = modern_runs.training_for(row)
    parts = [f"{row['gpus']}x {row['gpu']}", f"HB {modern_runs.hb_size(row)}", row["precision"]
             + (f"/{row['fp8_recipe']}" if row["fp8_recipe"] else ""),
             f"tp{st.tp} pp{st.pp} cp{st.cp} dp{st.dp}" + (f" ep{st.ep}" if st.ep > 1 else "")
             + (f" v{st.virtual_stages}" if st.virtual_stages > 1 else ""),
             f"mbs {st.microbatch_size}", f"ZeRO-{st.zero_stage}"
             + (" (Muon, layer-wise)" if training.optimizer == "muon" and st.zero_stage == 1
                else " (Muon)" if training.optimizer == "muon" else ""),
             *([f"end stages {st.pp_first_stage_layers} + {st.pp_last_stage_layers} layers (recipe layout)"]
               if st.pp_first_stage_layers is not None else []),
             st.schedule.value + (f" x{st.pipeline_flushes} (one schedule per accumulation step)"
                                  if st.pipeline_flushes > 1 else "")]
    rc = st.recompute.value
    if st.recompute_modules:
        rc += "[" + ",".join(m.value for m in st.recompute_modules) + "]"
    stated = modern_runs.stated_recompute(row)
    if modern_runs.block_checkpointing(row):
        layers = modern_runs.case(row)[0].layers
        parts.append(f"blocks checkpointed {st.recompute_num_layers if rc != 'none' else 0} of {layers} "
                     "(fms-fsdp selective AC, fraction not published: the fewest that fit)")
    else:
        parts.append(f"recompute {rc}" + (" (chosen: fits)" if stated is None
                                          else " (recipe)" if row["recompute"] is None else ""))
    if st.offload_activation_layers:
        parts.append(f"activations of {st.offload_activation_layers} layers offloaded (recipe)")
    parts.append(st.attention_kernel.value)
    if st.qkv_projection == "separate":
        parts.append("separate Q/K/V GEMMs")
    if st.elementwise_kernels == "eager":
        parts.append("eager element-wise ops")
    if st.cross_entropy == "eager":
        parts.append("eager cross entropy")
    llm = modern_runs.case(row)[0]
    has = {"activation_clamp": llm.activation_clamp is not None,
           "expert_bias": llm.moe is not None and llm.linear_bias, "rope": llm.rotary_embedding}
    op_by_op = [op.replace("_", " ") for op in st.unfused_ops if has[op]]
    if op_by_op and st.elementwise_kernels != "eager":
        parts.append(f"{', '.join(op_by_op)} op by op (framework)")
    if st.recompute_replay == "needed" and st.recomputes_whole_mlp:
        parts.append("recompute replays what the backward reads")
    if st.activation_input_fp8:
        parts.append("MLP activation input saved in fp8")
    default_saved = training.model_copy(update={"attention_output_saved": None})
    if attention_output_saved_once(default_saved) and not attention_output_saved_once(training):
        parts.append("attention output kept beside its quantised copy (Megatron-Core before v0.15)")
    if st.activation_layout == "batch_first" and st.sequence_parallel and st.tp > 1:
        parts.append("batch-first SP collectives (layout copies)")
    if st.ep > 1:
        parts.append(f"{st.moe_dispatcher} dispatcher" + (", EP overlap" if st.overlap_ep_comm else ""))
        if training.moe_routing != "uniform":
            parts.append(f"{training.moe_routing.replace('_', '-')} gate")
        if training.moe_load_balance == "learned":
            load = calib.compute.busiest_rank_load(training)
            parts.append(f"learned router (busiest EP rank {load:.2f}x the mean)")
    if modern_runs.case(row)[0].moe is not None and st.expert_gemm == "grouped":
        parts.append("grouped expert GEMMs")
    if st.overlap_tp_comm:
        parts.append("TP overlap")
    if st.cuda_graphs:
        parts.append("CUDA graphs")
    if row.get("nccl_version"):
        parts.append(f"NCCL {row['nccl_version']} (container)")
    fixed = modern_runs.corrections(row)
    if fixed:
        parts.append("run as " + ", ".join(f"{k} {v}" for k, v in fixed.items()) + " (the published "
                     + ", ".join(f"{k} {row[k]}" for k in fixed) + " is misprinted: recipe and neighbouring releases)")
    if training.low_precision_casts == "fused" and row["precision"] != "bf16":
        parts.append("quantisation fused by the compiler (GEMMs at the kernel rate)")
    return ", ".join(parts)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


def set_tables(calib, source=modern_runs.rows, system_of=None) -> list[tuple[str, list[str]]]:
    """(title, markdown table lines) per set: Megatron SC'21 Table 1, then the modern-runs sets; with
    another `source` (the held-out rows), its rows' sets alone. `system_of(row)`, where given, names
    each row's system after its assumptions."""
    out = []
    if source is modern_runs.rows:
        t1 = megatron_errors(calib)
        out.append((f"Megatron SC'21 Table 1 (training-runs.md): 10 rows, MAPE "
                    f"{100 * sum(abs(e) for *_, e in t1) / len(t1):.2f}%",
                    ["| row | measured TFLOP/s | designer | error |", "|---|---|---|---|"]
                    + [f"| {m} | {meas:.0f} | {pred:.1f} | {100 * e:+.1f}% |" for m, pred, meas, e in t1]))
    errs = {e.id: e for e in modern_runs.errors(calib, source=source)}
    for s, (mape, worst, n) in modern_runs.summary(list(errs.values())).items():
        lines = ["| row | measured tok/s/GPU | designer | error | assumptions |", "|---|---|---|---|---|"]
        for row in source():
            if row["id"] not in errs or row["set"] != s:
                continue
            e = errs[row["id"]]
            _, st = modern_runs.evaluate_row(row, calib)
            note = "" if e.fits else f"; model memory {e.memory_gb:.0f} GB over HBM"
            if system_of is not None:
                note += f"; {system_of(row)}"
            lines.append(f"| {e.id} | {e.measured:,.0f} | {e.predicted:,.0f} | {100 * e.error:+.1f}% | "
                         f"{assumptions(row, st, calib)}{note} |")
        out.append((f"{s}: {n} rows, MAPE {100 * mape:.1f}%, worst {100 * worst:.1f}%", lines))
    return out


def readme_block(tables: list[tuple[str, list[str]]]) -> str:
    """The README's collapsed per-set tables, markers included."""
    parts = [README_START]
    for title, lines in tables:
        parts += ["<details>", f"<summary>{title}</summary>", "", *lines, "", "</details>"]
    return "\n".join(parts + [README_END])


def replace_readme_block(text: str, block: str) -> str:
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md: the markers {README_START!r} and {README_END!r} are missing")
    return text[:start] + block + text[end + len(README_END):]


def write_tables(path: Path, title: str, intro: str, tables: list[tuple[str, list[str]]]) -> Path:
    """One markdown document: a title, an introduction, then each set's table under its heading."""
    lines = [f"# {title}", "", intro, ""]
    for heading, table in tables:
        lines += [f"## {heading}", "", *table, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@app.command(help=escape(__doc__))
def main(out: Annotated[Path, typer.Option("--out", help="the markdown file to write")] = OUT,
         readme: Annotated[bool, typer.Option(help="also rewrite the README's validation tables")] = True) -> None:
    t0 = time.perf_counter()
    calib = load_perf_calibration()
    made = "Generated by `python studies/calibration/validation_tables.py` from the shipped calibration"
    per_gpu = "Error = designer / measured - 1 on tokens/s per GPU."
    tables = set_tables(calib)
    write_tables(out, "Performance model against measured training runs",
                 f"{made}. Error = designer / measured - 1 on each source's own quantity (Table 1: TFLOP/s by the "
                 "paper's formula; the rest: tokens/s per GPU).", tables)
    held = set_tables(calib, source=modern_runs.heldout_rows)
    held_out = write_tables(out.parent / "heldout_runs.md", "Performance model against held-out measured runs",
                            f"{made}: the Megatron-Bridge performance-summary rows of containers 26.02 to 26.08 that "
                            "no fit reads (tests/perf/data/megatron_bridge_heldout.yaml), each run with the recipe its "
                            f"release's code states. {per_gpu}", held)
    mlperf = set_tables(calib, source=modern_runs.mlperf_heldout_rows,
                        system_of=lambda row: row["notes"].split("system: ", 1)[1].split(";", 1)[0])
    mlperf_out = write_tables(out.parent / "mlperf_heldout.md", "Performance model against held-out MLPerf results",
                              f"{made}: the MLPerf Training GPT-3 (v3.0 to v4.1) and Llama 3.1 (v5.0, v5.1) results on "
                              "NVIDIA GPUs that training-runs-modern.md S6 does not copy, other vendors' systems among "
                              "them (tests/perf/data/mlperf_heldout.yaml, with each row's system, config and caveats), "
                              f"stated as S6's rows are. No fit reads them. {per_gpu}", mlperf)
    if readme:
        README.write_text(replace_readme_block(README.read_text(), readme_block(tables)))
    rows = sum(len(t) - 2 for _, t in tables)
    print(f"wrote {out}{' and the README tables' if readme else ''} ({rows} rows), {held_out} "
          f"({sum(len(t) - 2 for _, t in held)} held-out rows) and {mlperf_out} "
          f"({sum(len(t) - 2 for _, t in mlperf)} MLPerf rows) in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    app()
