"""The study report: `report.html`, one self-contained interactive page (plotly, its JavaScript embedded,
nothing fetched when the page is viewed), and `pareto.png`, the same front as a static matplotlib plot.

The page holds the front (one per group when the study asks for fronts by a design column), budget and
deadline lines, hover text with each point's bill of materials, capex split, power, strategy and time
breakdown, buttons that switch each axis between linear and log, a sortable table of the front, and one
panel per front design with the time breakdown of its strategies as stacked bars.

Presentation only: every number shown comes from the frames passed in.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import pandas as pd

LimitAxis = Literal["capex_usd", "time_to_train_days"]
LIMIT_AXES: tuple[str, ...] = ("capex_usd", "time_to_train_days")

USD_PER_MUSD = 1e6
W_PER_MW = 1e6
S_PER_DAY = 86400.0

# Per-iteration time breakdown (designer.perf.records.Breakdown), in stacking order, with the names the
# page shows. The communication entries are each parallel dimension's full traffic time; the part hidden
# behind compute is overlapped_comm_s, so a stack can exceed the iteration time by that much.
BREAKDOWN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("compute_s", "compute"), ("tp_s", "TP"), ("cp_s", "CP"), ("pp_s", "PP"), ("dp_s", "DP"), ("ep_s", "EP"),
    ("bubble_s", "bubble"), ("host_s", "host"),
)
BREAKDOWN_COLORS: tuple[str, ...] = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b0b0b0",
                                     "#9d755d")
# Bill of materials and strategy fields of a point's hover text, in the order shown.
BOM_COLUMNS: tuple[str, ...] = ("family", "nic", "switch", "n_tiers", "switch_count", "transceiver_count", "nic_count")
STRATEGY_HOVER_COLUMNS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "cp", "microbatch_size", "schedule", "zero_stage",
                                           "recompute", "recompute_modules")
# A design's strategy panel shows at most this many strategies (the fastest), to keep the page small.
MAX_STRATEGIES_PER_DESIGN = 20

# Series styles. Series of one study often coincide (e.g. one design family's front lying exactly on
# another's), so each series differs from every other in marker shape AND line style, and markers are
# open so a point under another one still shows. Series i takes marker i % 8 and dash (i + i // 8) % 4:
# the pairs are distinct for the first 32 series.
_MPL_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
_MPL_LINESTYLES = ("-", "--", ":", "-.")
_PLOTLY_SYMBOLS = ("circle-open", "square-open", "diamond-open", "triangle-up-open", "triangle-down-open",
                   "cross-open", "x-open", "star-open")
_PLOTLY_DASHES = ("solid", "dash", "dot", "dashdot")
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f")
_LIMIT_COLORS = {"capex_usd": "#b22222", "time_to_train_days": "#1b5e20"}
# An axis switches to log scale by default when its values span more than this ratio (a front over a
# wide range of cluster sizes is then readable; the page's buttons switch it back).
_LOG_SPAN_RATIO = 10.0
# pareto.png writes a label once for points closer than this (figure pixels) that share it.
_SAME_LABEL_PX = 80.0


@dataclass(frozen=True)
class Limit:
    """A budget or deadline line on the front plot. `value` is in the axis' unit: USD for capex_usd (shown
    in million USD), days for time_to_train_days; `label` names it in the legend, e.g. 'budget $400M'."""

    axis: LimitAxis
    value: float
    label: str

    def __post_init__(self) -> None:
        if self.axis not in LIMIT_AXES:
            raise ValueError(f"limit axis '{self.axis}': allowed: {', '.join(LIMIT_AXES)}")
        if not (isinstance(self.value, (int, float)) and math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"limit '{self.label}': value {self.value!r} must be a finite number > 0")


def limit_for(metric: str, sense: str, rhs: float, label: str | None = None) -> Limit | None:
    """The plot line of a study limit `metric sense rhs` (a budget or a goal's subject_to entry), or None
    when the metric is not on a plot axis (power, energy). time_to_train_s is drawn in days."""
    if metric == "time_to_train_s":
        metric, rhs = "time_to_train_days", rhs / S_PER_DAY
    if metric not in LIMIT_AXES or not math.isfinite(rhs) or rhs <= 0:
        return None
    if label is None:
        shown = f"${rhs / USD_PER_MUSD:,.1f}M" if metric == "capex_usd" else f"{rhs:g} days"
        label = f"{'budget' if metric == 'capex_usd' else 'deadline'} {sense} {shown}"
    return Limit(metric, float(rhs), label)  # type: ignore[arg-type]


@dataclass(frozen=True)
class FrontSeries:
    """One front on the plot: its legend name and its points sorted by capex."""

    name: str
    rows: pd.DataFrame


def front_series(pareto: pd.DataFrame, fronts_by: pd.DataFrame | None, front_by: str | None) -> list[FrontSeries]:
    """The fronts to draw: one per `front_group` of `fronts_by` when given (named '<front_by> <value>'),
    otherwise the single front `pareto`."""
    if fronts_by is not None and front_by and len(fronts_by):
        groups = [(f"{front_by} {g}", df) for g, df in fronts_by.groupby("front_group", sort=True)]
    else:
        groups = [("Pareto front", pareto)]
    return [FrontSeries(name, df.sort_values(["capex_usd", "time_to_train_days"], kind="stable").reset_index(drop=True))
            for name, df in groups]


def candidate_points(designs: pd.DataFrame) -> pd.DataFrame:
    """The candidate designs that have a feasible strategy (drawn grey behind the fronts); empty when the
    designs frame has no best_time_to_train_s column or no feasible design."""
    if "best_time_to_train_s" not in designs or "capex_usd" not in designs:
        return designs.iloc[0:0]
    t = pd.to_numeric(designs["best_time_to_train_s"], errors="coerce")
    return designs[t.notna() & (t > 0) & (designs["capex_usd"] > 0)]


def point_label(row: pd.Series) -> str:
    """A point's label on the plot: platform and GPU count."""
    return f"{row['platform']}, {int(row['n_gpus']):,} GPUs"


def strategy_text(row: pd.Series | dict[str, Any]) -> str:
    """The strategy in one line (parallel degrees, microbatch, schedule, ZeRO stage, recompute)."""
    def get(k: str) -> Any:
        return row[k] if k in row else None
    parts = [f"{k}{get(k)}" for k in ("tp", "pp", "dp", "ep", "cp") if get(k) is not None]
    if get("microbatch_size") is not None:
        parts.append(f"mbs{get('microbatch_size')}")
    if get("schedule") is not None:
        parts.append(str(get("schedule")))
    if get("zero_stage") is not None:
        parts.append(f"ZeRO-{get('zero_stage')}")
    if get("recompute") is not None:
        modules = get("recompute_modules")
        listed = f" [{modules}]" if isinstance(modules, str) and modules else ""
        parts.append(f"recompute {get('recompute')}{listed}")
    return " ".join(parts)


def hover_text(row: pd.Series) -> str:
    """A front point's hover text (plotly's HTML subset): design, bill of materials, capex split, power,
    strategy and per-iteration time breakdown. Fields the row lacks are left out."""
    e = lambda v: html.escape(str(v))  # noqa: E731
    lines = [f"<b>{e(row['design_id'])}</b>",
             f"{e(point_label(row))}: ${row['capex_usd'] / USD_PER_MUSD:,.2f}M, {row['time_to_train_days']:,.2f} days"
             + (f", MFU {row['mfu']:.3f}" if "mfu" in row else "")]
    if "compute_capex_usd" in row and "network_capex_usd" in row:
        lines.append(f"capex: compute ${row['compute_capex_usd'] / USD_PER_MUSD:,.2f}M + network "
                     f"${row['network_capex_usd'] / USD_PER_MUSD:,.2f}M")
    if "power_w" in row:
        lines.append(f"power: {row['power_w'] / W_PER_MW:,.2f} MW"
                     + (f" IT, {row['facility_power_w'] / W_PER_MW:,.2f} MW at the facility meter (PUE {row['pue']:.2f})"
                        if "facility_power_w" in row and "pue" in row and pd.notna(row["facility_power_w"]) else ""))
    if "capex_total_usd" in row and pd.notna(row["capex_total_usd"]):
        parts = [f"{name} ${row[c] / USD_PER_MUSD:,.2f}M" for c, name in (
            ("storage_capex_usd", "storage"), ("frontend_capex_usd", "front-end"), ("facility_capex_usd", "facility"))
            if c in row and pd.notna(row[c]) and row[c]]
        lines.append(f"total capex ${row['capex_total_usd'] / USD_PER_MUSD:,.2f}M" + (f" (+ {', '.join(parts)})" if parts else ""))
    if "tco_usd" in row and pd.notna(row["tco_usd"]):
        lines.append(f"TCO of the run ${row['tco_usd'] / USD_PER_MUSD:,.2f}M (energy ${row['energy_cost_usd'] / USD_PER_MUSD:,.2f}M), "
                     f"${row['usd_per_million_tokens']:,.3f} per million tokens")
    if "goodput_fraction" in row and pd.notna(row["goodput_fraction"]):
        lines.append(f"goodput {row['goodput_fraction']:.3f}: {row['time_to_train_with_failures_days']:,.2f} days with failures "
                     f"({row['interruptions_per_day']:.2f} interruptions/day, checkpoint every {row['checkpoint_interval_s']:,.0f} s)")
    bom = [f"{k} {e(row[k])}" for k in BOM_COLUMNS if k in row]
    if bom:
        lines.append("BOM: " + ", ".join(bom))
    lines.append("strategy: " + e(strategy_text(row)))
    times = [f"{name} {row[c]:.3g}" for c, name in BREAKDOWN_COLUMNS if c in row and pd.notna(row[c])]
    if times:
        lines.append("per iteration (s): " + ", ".join(times))
    return "<br>".join(lines)


def _axis_range(values: Iterable[float]) -> tuple[float, float] | None:
    vs = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    return (min(vs), max(vs)) if vs else None


def _log_helps(span: tuple[float, float] | None) -> bool:
    return span is not None and span[1] / span[0] > _LOG_SPAN_RATIO


def _spans(series: Sequence[FrontSeries], candidates: pd.DataFrame,
           limits: Sequence[Limit]) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The extent of everything drawn, in plot units (million USD, days), limits included."""
    xs = [v / USD_PER_MUSD for s in series for v in s.rows["capex_usd"]]
    xs += [v / USD_PER_MUSD for v in candidates.get("capex_usd", [])]
    xs += [lim.value / USD_PER_MUSD for lim in limits if lim.axis == "capex_usd"]
    ys = [v for s in series for v in s.rows["time_to_train_days"]]
    ys += [v / S_PER_DAY for v in candidates.get("best_time_to_train_s", [])]
    ys += [lim.value for lim in limits if lim.axis == "time_to_train_days"]
    return _axis_range(xs), _axis_range(ys)


def _style(i: int) -> tuple[int, int]:
    """(marker index, line-style index) of series i; distinct pairs for i < 32 (see _MPL_MARKERS)."""
    return i % len(_MPL_MARKERS), (i + i // len(_MPL_MARKERS)) % len(_MPL_LINESTYLES)


# ---- pareto.png ---------------------------------------------------------------------------------------

def front_figure(*, pareto: pd.DataFrame, designs: pd.DataFrame, fronts_by: pd.DataFrame | None,
                 front_by: str | None, limits: Sequence[Limit], title: str):
    """The matplotlib Figure of pareto.png (Agg canvas, no pyplot state): each front as a step line with
    its points, a distinct (marker, line style) pair per front, labels (platform, GPUs), the candidate
    designs in grey when there are any, and a line per limit."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    series = front_series(pareto, fronts_by, front_by)
    candidates = candidate_points(designs)
    fig = Figure(figsize=(9, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if len(candidates):
        ax.scatter(candidates["capex_usd"] / USD_PER_MUSD, candidates["best_time_to_train_s"] / S_PER_DAY, s=12,
                   color="0.78", label=f"candidate designs, best strategy ({len(candidates)})", zorder=1)
    for i, s in enumerate(series):
        m, ls = _style(i)
        x = s.rows["capex_usd"] / USD_PER_MUSD
        y = s.rows["time_to_train_days"]
        # Later series are drawn smaller, so a point lying exactly on an earlier series' point shows
        # as a marker inside the other.
        ax.plot(x, y, drawstyle="steps-post", marker=_MPL_MARKERS[m], linestyle=_MPL_LINESTYLES[ls],
                color=_COLORS[i % len(_COLORS)], markerfacecolor="none", markersize=max(4.0, 9.0 - 1.2 * i),
                markeredgewidth=1.4, linewidth=1.4, label=f"{s.name} ({len(s.rows)})", zorder=3 + i)
    for lim in limits:
        color = _LIMIT_COLORS[lim.axis]
        if lim.axis == "capex_usd":
            ax.axvline(lim.value / USD_PER_MUSD, color=color, linestyle=(0, (6, 3)), linewidth=1.2, label=lim.label)
        else:
            ax.axhline(lim.value, color=color, linestyle=(0, (6, 3)), linewidth=1.2, label=lim.label)
    xspan, yspan = _spans(series, candidates, limits)
    if _log_helps(xspan):
        ax.set_xscale("log")
    if _log_helps(yspan):
        ax.set_yscale("log")
    for axis, log in ((ax.xaxis, _log_helps(xspan)), (ax.yaxis, _log_helps(yspan))):
        if log:
            # Ticks at 1, 2, 5 per decade written as plain numbers (not 2x10^2), which read as money and days.
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.4g}"))
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("capex (million USD)" + (", log scale" if _log_helps(xspan) else ""))
    ax.set_ylabel("time to train (days)" + (", log scale" if _log_helps(yspan) else ""))
    ax.set_title(title or "capex vs time to train")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    # After the layout: the labels are placed by their size on the final canvas.
    _label_points(fig, ax, series)
    return fig


def _label_points(fig, ax, series: Sequence[FrontSeries]) -> None:
    """Write each point's label (platform, GPUs) where it does not overlap a label already written.
    Neighbouring front points often share platform and GPU count (they differ in network) and series
    may coincide, so the first point of each run of equal labels in a series is labelled first; every
    point keeps its full details in report.html."""
    first, rest = [], []
    for i, s in enumerate(series):
        previous = None
        for _, r in s.rows.iterrows():
            text = point_label(r)
            (first if text != previous else rest).append((i, text, r["capex_usd"] / USD_PER_MUSD,
                                                          r["time_to_train_days"]))
            previous = text
    ax.autoscale_view()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    placed = []
    anchors: list[tuple[str, float, float]] = []  # (label, display x, display y) of each label written
    for i, text, x, y in first + rest:
        px, py = ax.transData.transform((x, y))
        # Points of other series next to an equal label (same platform and GPU count) need no label of
        # their own: the fronts of a study often run on top of each other.
        if any(t == text and math.hypot(px - ax_, py - ay) < _SAME_LABEL_PX for t, ax_, ay in anchors):
            continue
        # Above right of the point, else the other three corners: the first spot inside the axes that
        # overlaps no label already written.
        for dx, dy in ((4, 4), (-4, 4), (4, -4), (-4, -4)):
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                               color=_COLORS[i % len(_COLORS)], ha="left" if dx > 0 else "right",
                               va="bottom" if dy > 0 else "top")
            box = note.get_window_extent(renderer)
            fits = (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1)
            if fits and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                anchors.append((text, px, py))
                break
            note.remove()


# ---- report.html --------------------------------------------------------------------------------------

def front_plotly(*, pareto: pd.DataFrame, designs: pd.DataFrame, fronts_by: pd.DataFrame | None,
                 front_by: str | None, limits: Sequence[Limit], title: str):
    """The page's front plot (plotly Figure): candidates in grey, each front as a step line with labelled
    points and hover details, limit lines, and buttons switching each axis between linear and log."""
    import plotly.graph_objects as go

    series = front_series(pareto, fronts_by, front_by)
    candidates = candidate_points(designs)
    fig = go.Figure()
    if len(candidates):
        ids = candidates["design_id"] if "design_id" in candidates else [""] * len(candidates)
        fig.add_trace(go.Scatter(
            x=candidates["capex_usd"] / USD_PER_MUSD, y=candidates["best_time_to_train_s"] / S_PER_DAY,
            mode="markers", marker={"color": "#c8c8c8", "size": 5}, name=f"candidate designs ({len(candidates)})",
            hovertext=[f"{html.escape(str(d))}: ${c / USD_PER_MUSD:,.2f}M, {t / S_PER_DAY:,.2f} days"
                       for d, c, t in zip(ids, candidates["capex_usd"], candidates["best_time_to_train_s"])],
            hoverinfo="text"))
    shown_labels = _shown_labels(series)
    for i, s in enumerate(series):
        m, ls = _style(i)
        color = _COLORS[i % len(_COLORS)]
        fig.add_trace(go.Scatter(
            x=s.rows["capex_usd"] / USD_PER_MUSD, y=s.rows["time_to_train_days"], mode="lines+markers+text",
            name=html.escape(f"{s.name} ({len(s.rows)})"), line={"shape": "hv", "dash": _PLOTLY_DASHES[ls], "color": color},
            marker={"symbol": _PLOTLY_SYMBOLS[m], "size": max(6, 12 - 2 * i), "line": {"width": 2}},
            text=shown_labels[i], textposition="top right",
            textfont={"size": 9, "color": color}, hovertext=[hover_text(r) for _, r in s.rows.iterrows()],
            hoverinfo="text", customdata=list(s.rows["design_id"])))
    xspan, yspan = _spans(series, candidates, limits)
    # Limit lines are line traces across everything drawn (not layout shapes), so they stay right when
    # an axis switches to log scale.
    for lim in limits:
        color = _LIMIT_COLORS[lim.axis]
        if lim.axis == "capex_usd" and yspan is not None:
            x, y = [lim.value / USD_PER_MUSD] * 2, [yspan[0] / 1.05, yspan[1] * 1.05]
        elif lim.axis == "time_to_train_days" and xspan is not None:
            x, y = [xspan[0] / 1.05, xspan[1] * 1.05], [lim.value] * 2
        else:
            continue
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=html.escape(lim.label), hoverinfo="name",
                                 line={"color": color, "dash": "longdash", "width": 1.5}))
    xlog, ylog = _log_helps(xspan), _log_helps(yspan)
    buttons = []
    axes = {}
    for axis, name, log, span, title_text in (("xaxis", "capex", xlog, xspan, "capex (million USD)"),
                                              ("yaxis", "time", ylog, yspan, "time to train (days)")):
        # On a log axis plotly labels the ticks inside a decade with a bare digit ('2', '3'): the log
        # state lists its ticks (1-2-5 per decade) so every label is a plain amount; linear is automatic.
        as_log = {f"{axis}.type": "log", f"{axis}.tickmode": "array", f"{axis}.tickvals": _log_ticks(span)}
        as_linear = {f"{axis}.type": "linear", f"{axis}.tickmode": "auto", f"{axis}.tickvals": None}
        buttons.append({
            "type": "buttons", "direction": "right", "showactive": True, "active": 1 if log else 0,
            "x": 0.0 if axis == "xaxis" else 0.3, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
            "buttons": [{"label": f"{name}: linear", "method": "relayout", "args": [as_linear]},
                        {"label": f"{name}: log", "method": "relayout", "args": [as_log]}],
        })
        state = as_log if log else as_linear
        axes[axis] = {"title": {"text": title_text}, "tickformat": ",.4~r",
                      **{k.split(".", 1)[1]: v for k, v in state.items() if v is not None}}
    fig.update_layout(
        title={"text": html.escape(title or "capex vs time to train"), "x": 0.5, "xanchor": "center", "y": 0.97},
        xaxis=axes["xaxis"], yaxis=axes["yaxis"], updatemenus=buttons, height=660, margin={"t": 110},
        hovermode="closest", template="plotly_white", legend={"font": {"size": 11}})
    return fig


def _log_ticks(span: tuple[float, float] | None) -> list[float]:
    """Tick values for a log axis over `span` (padded a little): 1, 2, 5 per decade, and 3 as well when
    the span is under two decades (so a short axis still has several labels)."""
    if span is None:
        return []
    lo, hi = span[0] / 1.5, span[1] * 1.5
    subs = (1, 2, 5) if hi / lo >= 100 else (1, 2, 3, 5)
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        ticks += [m * 10.0 ** e for m in subs if lo <= m * 10.0 ** e <= hi]
    return ticks


# Two points of different series closer than this ratio in capex and in time, with equal labels, show
# the label once on the page's plot.
_SAME_LABEL_RATIO = 1.15


def _shown_labels(series: Sequence[FrontSeries]) -> list[list[str]]:
    """Per series, the label text each point shows on the page's plot ('' for none). Neighbouring front
    points often share platform and GPU count (they differ in network), and fronts of one study often run
    on top of each other: a label shows on the first point of each run of equal labels in a series,
    unless an earlier series shows it next to that point. Every point's hover text starts with it."""
    shown: list[list[str]] = []
    written: list[tuple[str, float, float]] = []
    for s in series:
        texts, previous = [], None
        for _, r in s.rows.iterrows():
            text, x, y = point_label(r), float(r["capex_usd"]), float(r["time_to_train_days"])
            near = any(t == text and max(x, x0) / min(x, x0) < _SAME_LABEL_RATIO
                       and max(y, y0) / min(y, y0) < _SAME_LABEL_RATIO for t, x0, y0 in written)
            show = text != previous and not near
            texts.append(text if show else "")
            if show:
                written.append((text, x, y))
            previous = text
        shown.append(texts)
    return shown


def _breakdown_source(strategies: pd.DataFrame | None) -> bool:
    """Whether the strategy table holds the per-strategy time breakdown (its export columns,
    designer.export.STRATEGY_TRIAL_COLUMNS, do not today)."""
    return strategies is not None and len(strategies) > 0 and all(c in strategies for c, _ in BREAKDOWN_COLUMNS)


def design_strategies(design_id: str, *, front_rows: pd.DataFrame, strategies: pd.DataFrame | None) -> pd.DataFrame:
    """The strategies of one front design whose time breakdown its panel shows, fastest first, at most
    MAX_STRATEGIES_PER_DESIGN. From `strategies` (its feasible rows) when that table holds the breakdown
    columns (compute_s, tp_s, ...); otherwise from the design's rows on the fronts (`front_rows`: pareto
    and fronts_by rows), which do: today's strategy table (designer.export.STRATEGY_TRIAL_COLUMNS) has
    iteration and training times but no breakdown, so a panel then shows the design's front strategy."""
    if _breakdown_source(strategies):
        assert strategies is not None
        rows = strategies[strategies["design_id"] == design_id]
        if "feasible" in rows:
            rows = rows[rows["feasible"].astype(bool)]
    else:
        rows = front_rows[front_rows["design_id"] == design_id]
        keep = [c for c in ("tp", "pp", "dp", "ep", "cp", "microbatch_size", "schedule", "virtual_stages",
                            "zero_stage", "recompute", "recompute_modules", "time_to_train_s") if c in rows]
        rows = rows.drop_duplicates(subset=keep or None)
    order = "time_to_train_s" if "time_to_train_s" in rows else "iteration_time_s"
    return rows.sort_values(order, kind="stable").head(MAX_STRATEGIES_PER_DESIGN).reset_index(drop=True)


def strategy_panel(design: pd.Series, rows: pd.DataFrame):
    """A design's panel: its strategies' per-iteration time breakdown as stacked horizontal bars, fastest
    on top, with the iteration time marked (the stack exceeds it by the overlapped communication)."""
    import plotly.graph_objects as go

    names = [html.escape(f"#{k + 1} {strategy_text(r)}") for k, (_, r) in enumerate(rows.iterrows())]
    fig = go.Figure()
    for (col, name), color in zip(BREAKDOWN_COLUMNS, BREAKDOWN_COLORS):
        fig.add_trace(go.Bar(y=names, x=rows[col], name=name, orientation="h", marker={"color": color},
                             hovertemplate=f"{name}: %{{x:.4g}} s<extra></extra>"))
    if "iteration_time_s" in rows:
        fig.add_trace(go.Scatter(y=names, x=rows["iteration_time_s"], mode="markers", name="iteration time",
                                 marker={"symbol": "line-ns-open", "size": 16, "color": "black", "line": {"width": 2}},
                                 hovertemplate="iteration: %{x:.4g} s<extra></extra>"))
    fig.update_layout(
        barmode="stack", template="plotly_white", height=150 + 26 * len(rows), margin={"t": 40, "b": 45, "l": 10},
        title={"text": html.escape(f"{design['design_id']}: {point_label(design)}, "
                                   f"${design['capex_usd'] / USD_PER_MUSD:,.1f}M"), "font": {"size": 13}},
        xaxis={"title": {"text": "time per iteration (s)"}}, yaxis={"autorange": "reversed", "automargin": True},
        legend={"orientation": "h", "y": -0.25 if len(rows) > 2 else -0.6, "font": {"size": 10}})
    return fig


# Front table columns: (header, pareto column, how a cell is written: text, int, musd, mw, f2, f3).
_TABLE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("rank", "front_rank", "int"), ("design", "design_id", "text"), ("family", "family", "text"),
    ("platform", "platform", "text"), ("GPUs", "n_gpus", "int"), ("capex (M USD)", "capex_usd", "musd"),
    ("network capex (M USD)", "network_capex_usd", "musd"), ("time to train (days)", "time_to_train_days", "f2"),
    ("MFU", "mfu", "f3"), ("power (MW)", "power_w", "mw"), ("switches", "switch_count", "int"),
    ("transceivers", "transceiver_count", "int"), ("NICs", "nic_count", "int"), ("tiers", "n_tiers", "int"),
    # shown when the study declares costs / reliability (designer.search.economics)
    ("total capex (M USD)", "capex_total_usd", "musd"), ("facility power (MW)", "facility_power_w", "mw"),
    ("TCO of the run (M USD)", "tco_usd", "musd"), ("USD per M tokens", "usd_per_million_tokens", "f3"),
    ("goodput", "goodput_fraction", "f3"), ("days with failures", "time_to_train_with_failures_days", "f2"),
)


def _cell(value: Any, kind: str) -> tuple[str, str]:
    """(shown text, sort key) of a table cell."""
    if kind == "text":
        return str(value), str(value)
    v = float(value)
    shown = {"int": f"{v:,.0f}", "musd": f"{v / USD_PER_MUSD:,.2f}", "mw": f"{v / W_PER_MW:,.2f}", "f2": f"{v:,.2f}",
             "f3": f"{v:.3f}"}[kind]
    return shown, repr(v)


def front_table(series: Sequence[FrontSeries]) -> str:
    """The front as a sortable HTML table (click a header to sort; the page's inline script), one row per
    point of every series, with its strategy."""
    grouped = len(series) > 1 or (series and series[0].name != "Pareto front")
    fields = [f for f in _TABLE_FIELDS if all(f[1] in s.rows for s in series)]
    head = (["<th data-type='text'>front</th>"] if grouped else []) + [
        f"<th data-type='{'text' if kind == 'text' else 'number'}'>{html.escape(h)}</th>" for h, _, kind in fields]
    head.append("<th data-type='text'>strategy</th>")
    body = []
    for s in series:
        for _, r in s.rows.iterrows():
            cells = [f"<td data-value='{html.escape(s.name, quote=True)}'>{html.escape(s.name)}</td>"] if grouped else []
            for _, col, kind in fields:
                shown, key = _cell(r[col], kind)
                cells.append(f"<td data-value='{html.escape(key, quote=True)}'>{html.escape(shown)}</td>")
            st = strategy_text(r)
            cells.append(f"<td data-value='{html.escape(st, quote=True)}'>{html.escape(st)}</td>")
            body.append(f"<tr>{''.join(cells)}</tr>")
    return (f"<table id='front-table' class='sortable'>\n<thead><tr>{''.join(head)}</tr></thead>\n<tbody>\n"
            + "\n".join(body) + "\n</tbody>\n</table>")


# Sorts a table.sortable by the clicked header: numbers by value, text alphabetically; a second click
# reverses. Each cell's data-value holds its sort key (the raw number, not the formatted text).
_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var headers = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(headers, function (th, col) {
    th.addEventListener('click', function () {
      var ascending = th.getAttribute('data-order') !== 'asc';
      Array.prototype.forEach.call(headers, function (h) { h.removeAttribute('data-order'); });
      th.setAttribute('data-order', ascending ? 'asc' : 'desc');
      var numeric = th.getAttribute('data-type') === 'number';
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-value'), y = b.cells[col].getAttribute('data-value');
        var c = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
        return ascending ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table.sortable { border-collapse: collapse; font-size: 12px; }
table.sortable th, table.sortable td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; }
table.sortable td:nth-child(-n+4), table.sortable td:last-child { text-align: left; }
table.sortable th { background: #f3f3f3; cursor: pointer; user-select: none; }
table.sortable th[data-order=asc]::after { content: ' \\25B2'; }
table.sortable th[data-order=desc]::after { content: ' \\25BC'; }
.panel { border-top: 1px solid #ddd; margin-top: 1em; }
.note { color: #555; font-size: 13px; }
"""


def report_html(*, pareto: pd.DataFrame, designs: pd.DataFrame, strategies: pd.DataFrame | None,
                fronts_by: pd.DataFrame | None, front_by: str | None, limits: Sequence[Limit], title: str) -> str:
    """report.html as a string: one self-contained page (plotly.js embedded once, no external resource)
    with the front plot, the limits, the sortable front table and a strategy panel per front design."""
    series = front_series(pareto, fronts_by, front_by)
    plot = front_plotly(pareto=pareto, designs=designs, fronts_by=fronts_by, front_by=front_by, limits=limits,
                        title=title)
    # Plotly reads trace names, labels and titles as its subset of HTML: they are escaped where they
    # are built (a limit 'budget <= $400M' would otherwise open a tag).
    config = {"displaylogo": False, "responsive": True}
    # The first figure embeds plotly.js; the later ones run after it in document order and reuse it.
    parts = [plot.to_html(full_html=False, include_plotlyjs=True, div_id="front-plot", config=config)]
    n_points = sum(len(s.rows) for s in series)
    heading = html.escape(title or "capex vs time to train")
    intro = (f"<p class='note'>{n_points} front points in {len(series)} "
             f"{'front' if len(series) == 1 else 'fronts'}; {len(candidate_points(designs))} candidate designs "
             "with a feasible strategy. Hover a point for its bill of materials, capex split, power, strategy and "
             "time breakdown; the buttons switch each axis between linear and log.</p>")
    limit_items = "".join(f"<li data-axis='{lim.axis}' data-value='{lim.value!r}'>{html.escape(lim.label)}</li>"
                          for lim in limits)
    limits_html = (f"<h2>Limits</h2>\n<ul id='limits'>{limit_items}</ul>" if limits else "")
    frames = [df for df in (pareto, fronts_by) if df is not None and len(df)]
    front_rows = pd.concat(frames, ignore_index=True) if frames else pareto
    with_breakdown = _breakdown_source(strategies)
    source = (f"Bars: the fastest feasible strategies of each design (at most {MAX_STRATEGIES_PER_DESIGN})."
              if with_breakdown else
              "Bars: each design's strategy on the front (the strategy table holds no per-strategy time "
              "breakdown).")
    panels = []
    seen: set[str] = set()
    for design_id in front_rows.sort_values("capex_usd", kind="stable")["design_id"] if len(front_rows) else []:
        if design_id in seen:
            continue
        seen.add(design_id)
        rows = design_strategies(design_id, front_rows=front_rows, strategies=strategies)
        if not len(rows):
            continue
        design = front_rows[front_rows["design_id"] == design_id].iloc[0]
        fig = strategy_panel(design, rows)
        panels.append(f"<div class='panel' id='panel-{html.escape(str(design_id), quote=True)}'>"
                      + fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"strategies-{len(panels)}",
                                    config=config) + "</div>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{heading}</title>\n<style>{_CSS}</style></head>\n<body>\n<h1>{heading}</h1>\n{intro}\n"
        + parts[0] + "\n" + limits_html + "\n<h2>Front</h2>\n<p class='note'>Click a header to sort.</p>\n"
        + front_table(series) + "\n<h2>Time breakdown per iteration</h2>\n"
        f"<p class='note'>{html.escape(source)} Communication bars are each parallel dimension's full traffic "
        "time; the part hidden behind compute makes the stack exceed the iteration time (marked).</p>\n"
        + "\n".join(panels) + f"\n<script>{_SORT_JS}</script>\n</body></html>\n")


def write_report(out_dir: Path, *, pareto: pd.DataFrame, designs: pd.DataFrame, strategies: pd.DataFrame | None,
                 fronts_by: pd.DataFrame | None, front_by: str | None, limits: Sequence[Limit],
                 title: str) -> list[Path]:
    """Write report.html (interactive, self-contained) and pareto.png into `out_dir`; returns their paths."""
    page = out_dir / "report.html"
    page.write_text(report_html(pareto=pareto, designs=designs, strategies=strategies, fronts_by=fronts_by,
                                front_by=front_by, limits=limits, title=title), encoding="utf-8")
    png = out_dir / "pareto.png"
    fig = front_figure(pareto=pareto, designs=designs, fronts_by=fronts_by, front_by=front_by, limits=limits,
                       title=title)
    fig.savefig(png, dpi=120)
    return [page, png]


__all__ = ["BREAKDOWN_COLUMNS", "FrontSeries", "Limit", "MAX_STRATEGIES_PER_DESIGN", "candidate_points",
           "design_strategies", "front_figure", "front_plotly", "front_series", "front_table", "hover_text",
           "limit_for", "point_label", "report_html", "strategy_panel", "strategy_text", "write_report"]
