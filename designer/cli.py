"""The `designer` command: thin wrappers that parse arguments, call the API and set exit codes.

Every DesignerError becomes one line on stderr and exit status 2; nothing prints a traceback.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from designer.errors import DesignerError, InfeasibleDesign, SpecError
from designer.usercode import refuse_code, study_code_refs

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="Design GPU clusters for LLM training: network MILP, performance model, Pareto search.")

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

# -q: no progress bar and no tables, only errors (and --json output when asked for)
_QUIET = {"on": False}


def _version(value: bool) -> None:
    if value:
        from designer import __version__

        typer.echo(f"designer {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", help="print the version and exit", is_eager=True,
                                 callback=_version),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                help="log to stderr: -v what each stage does (INFO), -vv details (DEBUG)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="errors only: no progress bar, no tables"),
) -> None:
    """Design GPU clusters for LLM training: network MILP, performance model, Pareto search."""
    import logging

    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True)
    logging.getLogger("designer").setLevel(level)
    logging.getLogger("optuna").setLevel(level)  # Optuna's own logging follows the same level
    _QUIET["on"] = quiet


def _fail(message: str, code: int, as_json: bool = False) -> None:
    typer.echo(f"error: {message}", err=True)
    if as_json:  # a pipe reading stdout gets a JSON object for a failure too
        _print_json({"error": message, "exit_code": code})
    raise typer.Exit(code)


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn designer's own errors into one line and a non-zero exit (under --json, also a JSON object
    {"error", "exit_code"} on stdout)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except InfeasibleDesign as err:
            _fail(str(err), EXIT_INFEASIBLE, as_json)
        except DesignerError as err:
            _fail(str(err), EXIT_BAD_INPUT, as_json)
        except OSError as err:  # a path the user gave cannot be read or written: one line, never a traceback
            where = f" '{err.filename}'" if err.filename else ""
            _fail(f"cannot use{where}: {err.strerror or err}", EXIT_BAD_INPUT, as_json)
        except KeyboardInterrupt:
            _fail("interrupted: outputs are only ever replaced by a complete set, so the previous ones are intact; "
                  "finished trials stay in the study storage and a rerun continues", 130)

    return wrapper


def _finite(obj: Any) -> Any:
    """`obj` with every non-finite float as None: JSON has no Infinity or NaN (RFC 8259), and strict
    parsers refuse Python's spelling of them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(_finite(obj), indent=2, sort_keys=False, default=str, allow_nan=False))


@app.command()
@one_line_errors
def bom(
    topology: str = typer.Option(..., help="rail-optimized | rail-only | oversubscribed | fat-tree"),
    gpus: int = typer.Option(..., help="number of GPUs"),
    hb_domain: int = typer.Option(8, "--hb-domain", help="GPUs per HB (NVLink) domain"),
    radix: int = typer.Option(64, help="switch radix at the port speed"),
    prices: str = typer.Option("railonly-v5", help="a price set id from the catalog (railonly-v1, railonly-v5)"),
    port_gbps: float = typer.Option(400.0, "--port-gbps", help="switch port and NIC speed"),
    nics_per_gpu: int = typer.Option(1, "--nics-per-gpu", help="rail width: NICs per GPU"),
    gpus_per_nic: int = typer.Option(1, "--gpus-per-nic", help="GPUs sharing one NIC (2: 4 NICs in an 8-GPU node)"),
    oversubscription: float = typer.Option(1.0, help="r for r:1 at the oversubscribed boundary"),
    oversubscribed_level: Optional[int] = typer.Option(None, "--oversubscribed-level", help="tier boundary that is oversubscribed"),
    convention: str = typer.Option("physical", help="physical (integer switches) | paper (Rail-only counting)"),
    catalog: list[Path] = typer.Option([], "--catalog", help="extra catalog YAML files"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Print the bill of materials of one topology family."""
    from designer.network.prices import bom_from_cli

    result = bom_from_cli(topology=topology, n_gpus=gpus, hb_domain_size=hb_domain, radix=radix,
                          prices=prices, port_gbps=port_gbps, nics_per_gpu=nics_per_gpu,
                          oversubscription=oversubscription, oversubscribed_level=oversubscribed_level,
                          convention=convention, catalog_files=tuple(catalog), gpus_per_nic=gpus_per_nic)
    if as_json:
        _print_json(result)
        return
    from designer.report import print_bom

    if not _QUIET["on"]:
        print_bom(result)


@app.command()
@one_line_errors
def network(
    study: Path = typer.Argument(..., help="study YAML (a network study, or a full study with a network: section)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (the designs, status, gap, budget slacks)"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder for designs.csv"),
    no_hooks: bool = typer.Option(False, "--no-hooks", help="refuse a study that names hooks or trial constraints (code that would run)"),
) -> None:
    """Solve the study's network-sizing MILP; print the chosen design and write the designs as CSV."""
    from designer.network.api import load_network_study, solve_network
    from designer.report import print_network_result, write_designs_csv

    if out is not None and out.exists() and not out.is_dir():
        raise SpecError(f"--out '{out}': is a file, not a folder; give a folder for designs.csv")
    if out is not None and (out / "meta.json").is_file():
        # a study run's result set: its designs.csv belongs to its completion record (meta.json)
        raise SpecError(f"--out '{out}': holds the results of a `designer run` (meta.json); writing designs.csv "
                        "there would break them; give another --out")
    spec = load_network_study(study)
    if no_hooks:
        refuse_code(study_code_refs(spec))
    result = solve_network(spec)
    if out is not None:
        write_designs_csv(result, out)
    if as_json:
        _print_json(result.to_json())
    elif not _QUIET["on"]:
        print_network_result(result)
        if out is not None:
            typer.echo(f"designs written to {out / 'designs.csv'}")


@app.command()
@one_line_errors
def evaluate(
    scenario: Path = typer.Argument(..., help="scenario YAML: model, training, strategy, system"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (metrics, breakdown, defaulted fields)"),
) -> None:
    """Evaluate one strategy on one cluster: iteration time, time-to-train, MFU, memory, breakdown."""
    from designer.scenario import domain_notes, evaluate_scenario, load_scenario, metrics_json, resolved_defaults
    from designer.report import print_mapping

    from designer.perf.records import Infeasible

    sc = load_scenario(scenario)
    result = evaluate_scenario(sc)
    data = metrics_json(result)
    defaults = {k: (list(v) if isinstance(v, tuple) else v) for k, v in resolved_defaults(sc)}
    # (a strategy the cluster cannot run at all gets no layout notes; one that does not fit in memory does)
    notes = domain_notes(sc) if not isinstance(result, Infeasible) or result.kind == "memory" else {}
    if as_json:
        _print_json({**data, "defaulted": defaults, "notes": notes})
    elif not _QUIET["on"]:
        data.pop("breakdown", None)
        print_mapping(f"evaluate {scenario.name}", data)
        print_mapping("defaulted (not set in the scenario)", defaults)
        if notes:
            print_mapping("notes", notes)
    if isinstance(result, Infeasible):
        # a strategy the cluster cannot run is an answer, not a success: 3 when it does not fit in
        # memory, 2 when the strategy itself is invalid for the model or the cluster
        _fail(f"strategy is infeasible ({result.kind}): {result.reason}",
              EXIT_INFEASIBLE if result.kind == "memory" else EXIT_BAD_INPUT)


@app.command()
@one_line_errors
def run(
    study: Path = typer.Argument(..., help="study YAML"),
    out: Optional[Path] = typer.Option(None, "--out", help="output folder (default: the study's output.dir)"),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", help="trials per design for the optuna search"),
    workers: int = typer.Option(1, "--workers", help="worker processes on this machine (at most 4 per CPU)"),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL (default: a journal file in the output folder)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="the search seed (search.seed)"),
    design_trials: Optional[int] = typer.Option(None, "--design-trials", help="outer Optuna trials (cluster designs) in co-design"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace another study's results in --out"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (files written, the front, MILP status, goal) "
                                 "instead of the progress bar and tables"),
    no_hooks: bool = typer.Option(False, "--no-hooks", help="refuse a study that names hooks or trial constraints (code that would run)"),
) -> None:
    """Run a study: cluster designs priced by the MILP, strategy search, the goal, Pareto front, export.
    Exit 3 when no design meets the goal (the front found is still written)."""
    from designer.pipeline import GoalNotMet, run_study
    from designer.report import print_goal, print_study_summary, progress_bar, run_json
    from designer.spec.study import load_study

    spec = load_study(study)
    if no_hooks:
        refuse_code(study_code_refs(spec))
    if design_trials is not None:
        spec = spec.with_updates(design_search={**spec.design_search.model_dump(), "n_trials": design_trials})
    quiet = as_json or _QUIET["on"]
    try:
        if quiet:
            result = run_study(spec, out_dir=out, n_trials=n_trials, workers=workers, storage=storage,
                               seed=seed, overwrite=overwrite)
        else:
            with progress_bar() as progress:
                result = run_study(spec, out_dir=out, n_trials=n_trials, workers=workers, storage=storage,
                                   seed=seed, progress=progress, overwrite=overwrite)
    except GoalNotMet as err:
        if as_json:
            _print_json(run_json(err.result))
        elif not quiet:
            print_study_summary(err.result)
        _fail(str(err), EXIT_INFEASIBLE)
    if as_json:
        _print_json(run_json(result))
    elif not quiet:
        print_study_summary(result)
        print_goal(result)


@app.command()
@one_line_errors
def space(
    study: Path = typer.Argument(..., help="study YAML"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="also explain one GPU count"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Explain a study's spaces: the cluster designs and GPU counts of the outer space (and the counts
    left out, with their arithmetic), and the strategy values the rules remove, per platform."""
    from designer.pipeline import explain_study
    from designer.report import print_space
    from designer.spec.study import load_study

    data = explain_study(load_study(study), gpus=gpus)
    if as_json:
        _print_json(data)
    else:
        if not _QUIET["on"]:
            print_space(data)


@app.command()
@one_line_errors
def worker(
    study: Path = typer.Argument(..., help="study YAML"),
    storage: str = typer.Option(..., "--storage", help="shared storage URL, e.g. postgresql://user@host/db"),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", help="trials per design (the inner Optuna studies)"),
    wait_s: float = typer.Option(600.0, "--wait-s", help="how long to wait for the main run's study before giving up"),
    no_hooks: bool = typer.Option(False, "--no-hooks", help="refuse a study that names hooks or trial constraints (code that would run)"),
) -> None:
    """Run one more worker of a study against a shared storage."""
    from designer.pipeline import run_worker
    from designer.spec.study import load_study

    spec = load_study(study)
    if no_hooks:
        refuse_code(study_code_refs(spec))
    if not math.isfinite(wait_s) or wait_s < 0:
        raise SpecError(f"--wait-s = {wait_s:g}: must be a finite number of seconds >= 0")
    if n_trials is not None and n_trials < 1:
        raise SpecError(f"--n-trials = {n_trials}: must be >= 1")
    count = run_worker(spec, storage=storage, wait_s=wait_s, n_trials=n_trials)
    typer.echo(f"worker finished; it worked on {count} design studies")


@app.command()
@one_line_errors
def pareto(
    out_dir: Path = typer.Argument(..., help="a study's output folder"),
    export: Optional[Path] = typer.Option(None, "--export", help="write the front to this CSV"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object: the front, one record per point"),
) -> None:
    """Re-read a study's Pareto front, print it, and optionally export it."""
    from designer.pipeline import read_pareto
    from designer.report import print_front

    if export is not None and export.is_dir():
        raise SpecError(f"--export '{export}': is a folder; give a file path, e.g. {export / 'pareto.csv'}")
    front = read_pareto(out_dir)
    if export is not None:
        _check_export_target(export, out_dir)
    if as_json:
        from designer.report import frame_records

        _print_json({"out_dir": str(out_dir), "n_points": len(front), "front": frame_records(front)})
    elif not _QUIET["on"]:
        print_front(front)
    if export is not None:
        _write_atomically(export, lambda path: front.to_csv(path, index=False), "--export")
        if not as_json and not _QUIET["on"]:
            typer.echo(f"front written to {export}")


def _check_export_target(export: Path, out_dir: Path) -> None:
    """An export never replaces a file of a designer result set (a folder whose meta.json lists it:
    this study's, another's, or one moved to previous/), a run's state (its Optuna journal and locks,
    wherever the journal lies), nor anything but a regular file (a link, a pipe or a device would be
    replaced by the rename that writes it)."""
    if export.is_symlink() or (export.exists() and not export.is_file()):
        raise SpecError(f"--export '{export}': exists and is not a regular file; give a new file path")
    if export.resolve().parent == out_dir.resolve() and (out_dir / export.name).exists():
        # a file of the study's own set: overwriting it would break the folder's completion record
        raise SpecError(f"--export '{export}': is one of the study's own result files; give a path outside "
                        f"'{out_dir}' or a new name")
    from designer.search.runner import JOURNAL_NAME, is_journal

    target = export.resolve()
    if target.is_file() and is_journal(target):
        raise SpecError(f"--export '{export}': is an Optuna journal (a study's trial storage); give a new file path")
    # a run's own state, which meta.json does not list: its trial storage, the storage's lock, the run lock
    run_state = {JOURNAL_NAME, f"{JOURNAL_NAME}.lock", ".designer-run.lock"}
    here = target.parent
    if target.name in run_state and ((here / "meta.json").is_file() or (here / ".designer-run.lock").exists()):
        raise SpecError(f"--export '{export}': is the run state of the designer result set in '{here}' (its study "
                        "storage or a lock); give a path outside it or a new name")
    for folder in target.parents:
        meta = folder / "meta.json"
        if not meta.is_file():
            continue
        try:
            record = json.loads(meta.read_text())
            files = record.get("files") if isinstance(record, dict) else None
            listed = set(files) if isinstance(files, (dict, list)) else set()
        except (ValueError, UnicodeDecodeError, OSError):
            listed = set()
        rel = target.relative_to(folder).as_posix()
        if rel in listed or rel == "meta.json":
            raise SpecError(f"--export '{export}': is a file of the designer result set in '{folder}'; "
                            "give a path outside it or a new name")


def _write_atomically(target: Path, write: Callable[[Path], None], flag: str) -> None:
    """Write beside the target, then rename over it: a file is replaced whole or not at all."""
    import os

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        write(tmp)
        os.replace(tmp, target)
    except OSError as err:
        raise SpecError(f"{flag} '{target}': cannot write there ({err.strerror})") from None


def _given_value(param: Any) -> str:
    """' (got VALUE)' for a bad option value, read back from the command line (the usage error itself
    names the option and what it allows, not what was typed)."""
    opts = getattr(param, "opts", None) or []
    args = sys.argv[1:]
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return f" (got '{args[i + 1]}')"
            if a.startswith(o + "="):
                return f" (got '{a[len(o) + 1:]}')"
    return ""


def main() -> None:
    """The entry point: typer in non-standalone mode, so that a bad flag or value is one line too
    (click's usage boxes are for humans at a terminal; scripts read the first line of stderr)."""
    try:
        rv = app(standalone_mode=False)
    except typer.Exit as err:
        sys.exit(err.exit_code)
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    except Exception as err:
        # typer's usage errors (bad flag, bad value, missing argument): duck-typed on the public
        # interface every one of them has, since typer does not export their base class
        if not (hasattr(err, "format_message") and hasattr(err, "exit_code")):
            raise
        if type(err).__name__ == "NoArgsIsHelpError":
            ctx = getattr(err, "ctx", None)
            typer.echo(ctx.get_help() if ctx is not None else err.format_message())
            sys.exit(0)
        ctx = getattr(err, "ctx", None)
        path = getattr(ctx, "command_path", "designer") if ctx is not None else "designer"
        got = _given_value(getattr(err, "param", None))
        typer.echo(f"error: {' '.join(str(err.format_message()).split())}{got} (see `{path} --help`)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    sys.exit(main())
