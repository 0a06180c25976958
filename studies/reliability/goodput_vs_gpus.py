"""Goodput against cluster size: what failures, checkpoints and restarts cost a training run at 16k,
100k and 1M GPUs, for the three network families.

    .venv/bin/python studies/reliability/goodput_vs_gpus.py [--out DIR] [--hb-domain 8]

The job is Llama 3.1 405B's pre-training: 30.84M H100 GPU-hours of work (Meta's model card), a
checkpoint of 405e9 parameters x 14 bytes (bf16 weights, fp32 master, Adam m and v; 5.67 TB) written
at 2 TB/s (Llama 3's storage: "sustained throughput of 2 TB/s", Dubey et al. 2024 §3.3.1), restarts
of 2 min detection + 8 min restart + the checkpoint's read time (assumed, designer.spec.reliability).
Failure rates: the shipped defaults (Llama 3 Table 5, designer.spec.network_study.FailureRates). The
work scales perfectly with the GPU count, so the sizes differ by failures only; each family's network
is its closed form at radix 64 (designer.network.topology), with the spare HB domains that hold the
whole job at 99.9 % (designer.analysis.failures.required_spares).

Per (family, GPU count) and recovery policy: interruptions per day, the job's MTBF, Daly's optimal
checkpoint interval, goodput with hot spares (and per built GPU), when waiting for repairs, when
restarting degraded; days to train with spares. Writes results/reliability/goodput_vs_gpus.csv and
goodput_vs_gpus.png.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import typer  # noqa: E402

from designer.analysis.goodput import CheckpointSpec, RecoverySpec, checkpoint_state_bytes, goodput_vs_gpus  # noqa: E402
from designer.spec.reliability import DEFAULT_DETECT_S, DEFAULT_RESTART_S  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WORK_GPU_H = 30.84e6  # Llama 3.1 405B: 30.84M H100-80GB GPU-hours (Meta's Llama 3.1 model card)
PARAMS = 405e9
STORAGE_BYTES_PER_S = 2e12  # Llama 3: Tectonic storage, 2 TB/s sustained (Dubey et al. 2024 §3.3.1)
COUNTS = (16_384, 100_000, 1_000_000)
FAMILIES = ("rail-optimized", "rail-only", "oversubscribed")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(out: Annotated[Path, typer.Option(help="output folder")] = REPO / "results" / "reliability",
         hb_domain: Annotated[int, typer.Option(help="HB domain size K (8: HGX nodes)")] = 8) -> None:
    t0 = time.perf_counter()
    ckpt = CheckpointSpec(state_bytes=checkpoint_state_bytes(PARAMS), write_bytes_per_s=STORAGE_BYTES_PER_S)
    rec = RecoverySpec(detect_s=DEFAULT_DETECT_S, restart_s=DEFAULT_RESTART_S)
    rows = goodput_vs_gpus(ckpt, rec, work_gpu_h=WORK_GPU_H, gpu_counts=COUNTS, families=FAMILIES,
                           hb_domain_size=hb_domain, radix=64)
    df = pd.DataFrame([r.model_dump(mode="json") for r in rows])
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "goodput_vs_gpus.csv", index=False, float_format="%.6g")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for fam, g in df.groupby("family", sort=False):
        a.plot(g["n_gpus"], g["goodput_spare"], marker="o", label=f"{fam}: hot spares")
        a.plot(g["n_gpus"], g["goodput_degraded"], marker="x", linestyle="--", label=f"{fam}: degraded restart")
        b.plot(g["n_gpus"], g["time_to_train_spare_days"], marker="o", label=fam)
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
    a.set_ylabel("goodput fraction")
    a.set_title("Goodput under failures (Daly-optimal checkpoints)")
    b.set_ylabel("days to train, with failures and spares")
    b.set_title(f"Llama 3.1 405B work ({WORK_GPU_H / 1e6:.2f}M GPU-h)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "goodput_vs_gpus.png", dpi=120)
    cols = ["family", "n_gpus", "interruptions_per_day", "job_mtbf_h", "interval_s", "spare_domains", "goodput_spare",
            "goodput_degraded", "time_to_train_spare_days"]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"written to {out}: goodput_vs_gpus.csv, goodput_vs_gpus.png ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    app()
