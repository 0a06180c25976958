"""Fit the few physical parameters of the compute model on the measured training runs.

Sets: Megatron SC'21 Table 1 (training-runs.md) and the four method classes of
training-runs-modern.md (dense-3d, dense-fsdp, long-ctx, moe), scored on each source's own measured
quantity (TFLOP/s by the paper's formula for Table 1, tokens/s per GPU for the rest). The objective
is the mean of the per-set MAPEs plus a penalty on rows beyond 10%. Coordinate descent over a
golden-section search per parameter, a few sweeps; the rows' recompute choice (where unstated) is
taken once from the starting calibration and re-checked at the end.

    python studies/calibration/fit_compute.py [--sweeps 2] [--only NAME --only NAME]  (list options: repeat the flag)

It prints the fitted values; designer/data/compute_efficiency.yaml holds them with their provenance.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from designer.perf.iteration import iteration_arrays, megatron_paper_flops  # noqa: E402
from designer.perf.model import at_nccl_release, load_perf_calibration  # noqa: E402
from designer.perf.records import StrategyArrays  # noqa: E402
from tests.perf import modern_runs  # noqa: E402
from tests.perf.test_training_runs import megatron_cases  # noqa: E402


def compiled_cases(calib):
    """[(set, name, llm, training, StrategyArrays, system, measured, to_quantity, nccl_version)] with
    recompute fixed; nccl_version is the row's NCCL release (None: the calibration's own)."""
    out = []
    for row, llm, tr, st, sy in megatron_cases():
        f = megatron_paper_flops(llm, tr) / (row["gpus"] * 1e12)
        out.append(("table1", row["model"], llm, tr, StrategyArrays.from_strategies([st]), sy, row["tflops"],
                    lambda r, f=f: f / r["iteration_time_s"][0], None))
    for row in modern_runs.rows():
        if not row["use"]:
            continue
        llm, tr, _, sy = modern_runs.case(row)
        _, st = modern_runs.evaluate_row(row, calib)
        n = row["gpus"]
        out.append((row["set"], row["id"], llm, tr, StrategyArrays.from_strategies([st]), sy,
                    row["measured"]["tokens_per_s_per_gpu"], lambda r, n=n: r["tokens_per_s"][0] / n,
                    row.get("nccl_version")))
    return out


def case_errors(cases, calib) -> list[float]:
    """predicted / measured - 1 per case, in order."""
    out = []
    by_version = {}  # the trial calibration at each row's NCCL release, built once per call
    for _, _, llm, tr, S, sy, meas, q, version in cases:
        if version not in by_version:
            by_version[version] = at_nccl_release(calib, version)
        out.append(q(iteration_arrays(llm, tr, S, sy, by_version[version])) / meas - 1.0)
    return out


def set_errors(cases, calib) -> dict[str, np.ndarray]:
    errs: dict[str, list] = {}
    for case, e in zip(cases, case_errors(cases, calib)):
        errs.setdefault(case[0], []).append(e)
    return {k: np.array(v) for k, v in errs.items()}


def objective(errs) -> float:
    mape = np.mean([np.mean(np.abs(e)) for e in errs.values()])
    tail = np.mean([np.mean(np.maximum(np.abs(e) - 0.10, 0.0)) for e in errs.values()])
    return float(mape + 0.5 * tail)


# ---- the parameters: (name, getter, setter, bounds) on a PerfCalibration ----------------------


def _ceiling(arch, prec):
    def get(c):
        return c.compute.gemm_ceiling("", arch, prec)

    def put(c, x):
        rows = tuple((a, p, (x if (a, p) == (arch, prec) else e)) for a, p, e in c.compute.gemm_ceilings)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, gemm_ceilings=rows))
    return f"gemm.{arch}.{prec}", get, put, (0.35, 0.95)


def _gpu_ceiling(gpu, prec, arch):
    def get(c):
        return c.compute.gemm_ceiling(gpu, arch, prec)

    def put(c, x):
        rows = tuple(r for r in c.compute.gpu_gemm_ceilings if (r[0], r[1]) != (gpu, prec)) + ((gpu, prec, x),)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, gpu_gemm_ceilings=rows))
    return f"gemm.{gpu}.{prec}", get, put, (0.3, 0.95)


def _attention(kernel, arch):
    """One scale per (kernel, generation); the backward/forward ratio stays the literature's."""
    def get(c):
        return next(f for k, a, f, b in c.compute.attention if (k, a) == (kernel, arch))

    def put(c, x):
        rows = tuple((k, a, x, b * x / f) if (k, a) == (kernel, arch) else (k, a, f, b)
                     for k, a, f, b in c.compute.attention)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, attention=rows))
    return f"attention.{kernel}.{arch}.forward", get, put, (0.15, 0.9)


def _scalar(field, lo, hi):
    def get(c):
        return getattr(c.compute, field)

    def put(c, x):
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, **{field: x}))
    return field, get, put, (lo, hi)


def _recipe_factor(recipe):
    def get(c):
        return dict(c.compute.fp8_recipe_gemm_factors).get(recipe, 1.0)

    def put(c, x):
        rows = tuple(r for r in c.compute.fp8_recipe_gemm_factors if r[0] != recipe) + ((recipe, x),)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, fp8_recipe_gemm_factors=rows))
    return f"gemm.fp8_recipe_factor.{recipe}", get, put, (0.3, 1.0)


def _clock_scale(name, gpus, bounds=(1.0, 1.4)):
    """One sustained-clock factor on the GEMM ceilings of the parts of a generation that share a chip
    (B300, GB300)."""
    def get(c):
        return dict(c.compute.gpu_clock_scales).get(gpus[0], 1.0)

    def put(c, x):
        rows = tuple(r for r in c.compute.gpu_clock_scales if r[0] not in gpus) + tuple((g, x) for g in gpus)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, gpu_clock_scales=rows))
    return f"gemm.clock_scale.{name}", get, put, bounds


def _attention_clock_scale(gpu, bounds):
    """One factor on both passes of a part's fused attention (a part held below its generation's
    clocks: the power-capped H100, whose GEMM ceilings are its own)."""
    def get(c):
        return c.compute.attention_clock_scale(gpu)[0]

    def put(c, x):
        rows = tuple(r for r in c.compute.attention_clock_scales if r[0] != gpu) + ((gpu, x, x),)
        return dataclasses.replace(c, compute=dataclasses.replace(c.compute, attention_clock_scales=rows))
    return f"attention.clock_scale.{gpu}", get, put, bounds


def _tied_ceiling(arch, prec, to_arch, to_prec):
    """Blackwell BF16 has no dense calibration row: it keeps Hopper BF16's fraction of peak (cuBLAS
    reaches similar fractions of both), moved with it."""
    name, get, put, bounds = _ceiling(to_arch, to_prec)

    def put_both(c, x):
        return _ceiling(arch, prec)[2](put(c, x), x)
    return name, get, put_both, bounds


DENSE = ("table1", "dense-3d", "dense-fsdp", "long-ctx")
MOE = ("moe",)
# (parameter, the sets it is fitted on)
PARAMS = [
    (_tied_ceiling("blackwell", "bf16", "hopper", "bf16"), DENSE), (_ceiling("hopper", "fp8"), DENSE),
    (_ceiling("blackwell", "fp8"), DENSE), (_ceiling("blackwell", "mxfp8"), DENSE),
    (_ceiling("blackwell", "nvfp4"), DENSE),
    (_gpu_ceiling("h100_96gb_500w", "bf16", "hopper"), DENSE), (_gpu_ceiling("h100_96gb_500w", "fp8", "hopper"), DENSE),
    # cuDNN's attention is not fitted: it is measured (compute_efficiency.yaml attention.kernels.cudnn)
    # FlashAttention-2's figures are the literature's, not fitted (compute_efficiency.yaml sources.attention)
    (_attention("triton", "hopper"), DENSE), (_attention("triton", "ampere"), DENSE),
    (_scalar("hbm_efficiency", 0.4, 0.95), DENSE), (_scalar("framework_per_layer_s", 0.0, 2e-3), DENSE + MOE),
    (_scalar("framework_per_iteration_s", 0.0, 0.2), DENSE + MOE), (_scalar("framework_per_expert_s", 0.0, 1e-3), MOE),
    (_scalar("overlap_slowdown", 0.0, 0.5), DENSE + MOE),
    (_scalar("grouped_gemm_efficiency", 0.2, 1.0), MOE),
    # only the rows whose source says the router's balance was not forced move it (ModelZoo's dropless
    # long-context rows, DeepSeek-V3's own run)
    (_scalar("learned_busiest_rank_load", 1.0, 1.6), ("long-ctx",) + MOE), (_recipe_factor("rowwise"), DENSE),
    (_clock_scale("blackwell_ultra", ("b300", "gb300")), DENSE + MOE),
    (_attention_clock_scale("h100_96gb_500w", (0.4, 1.0)), DENSE),
]


def golden(f, lo, hi, x0, iters=10):
    g = (np.sqrt(5) - 1) / 2
    best_x, best_v = x0, f(x0)
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    for x, v in ((c, fc), (d, fd)):
        if v < best_v:
            best_x, best_v = x, v
    return best_x, best_v


def fit(cases, calib, params, sweeps: int, echo=None):
    """Coordinate descent: each parameter in turn by golden-section search over its bounds, on the
    sets it is fitted on, kept only where the objective falls; `sweeps` passes over `params`.
    Returns the calibration and the names of the parameters no case moved (the objective the same
    wherever the search probed: no row of theirs among the cases), which keep their starting value."""
    flat: dict[str, bool] = {}  # name -> flat in every sweep so far
    for sweep in range(sweeps):
        for (name, get, put, (lo, hi)), sets in params:
            sub = [c for c in cases if c[0] in sets]
            cur = objective(set_errors(sub, calib)) if sub else 0.0
            probed = []

            def f(x, sub=sub, put=put, probed=probed):
                probed.append(objective(set_errors(sub, put(calib, x))))
                return probed[-1]
            x, v = golden(f, lo, hi, get(calib)) if sub else (get(calib), cur)
            is_flat = not sub or max(abs(p - cur) for p in probed) < 1e-12
            flat[name] = flat.get(name, True) and is_flat
            if not is_flat and v < cur:
                calib, cur = put(calib, x), v
            if echo:
                echo(f"  sweep {sweep} {name:40s} {get(calib):.4g}  objective on {'+'.join(sets)} {cur:.4f}")
    return calib, {name for name, f in flat.items() if f}


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(sweeps: Annotated[int, typer.Option("--sweeps", help="coordinate-descent sweeps over the parameters")] = 2,
         only: Annotated[list[str] | None, typer.Option(
             "--only", help="fit only these parameter names (repeat the flag for several; default: all)")] = None,
         ) -> None:
    t0 = time.perf_counter()
    calib = load_perf_calibration()
    cases = compiled_cases(calib)
    print(f"start objective {objective(set_errors(cases, calib)):.4f} ({len(cases)} rows)")
    params = [p for p in PARAMS if not only or p[0][0] in only]
    calib, _ = fit(cases, calib, params, sweeps, echo=lambda m: print(m, flush=True))
    errs = set_errors(compiled_cases(calib), calib)
    for s, e in errs.items():
        print(f"{s:10s} rows {len(e):3d}  MAPE {100 * np.mean(np.abs(e)):5.1f}%  worst {100 * np.max(np.abs(e)):5.1f}%")
    for (name, get, _, _), _sets in PARAMS:
        print(f"{name} = {get(calib):.4g}")
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    app()
