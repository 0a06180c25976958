"""report.html and pareto.png (designer.report_page) on committed study results.

The page is checked three ways: its text (self-contained, every front point in the plot data, the limits,
the table), a real headless Chromium that renders it (no JavaScript console message, the plot's points
drawn, the table sorts on a header click), and the matplotlib figure of pareto.png (one distinct marker
and line style per series, the limit lines). Expected values come from the input frames.
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from designer.export import STRATEGY_TRIAL_COLUMNS
from designer.report_page import (BREAKDOWN_COLUMNS, MAX_STRATEGIES_PER_DESIGN, Limit, front_figure, hover_text,
                                  limit_for, report_html, write_report)

ROOT = Path(__file__).resolve().parents[1]
FABRICS = ROOT / "results" / "gpt1t_fabrics"  # three design families, fronts by family, 24 candidates
HEADLINE = ROOT / "results" / "railonly" / "headline"  # coincident fronts: rail-only under rail-optimized
CHROMIUM_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y chromium"


def _study(folder: Path, front_by: str) -> dict:
    return {"pareto": pd.read_csv(folder / "pareto.csv"), "designs": pd.read_csv(folder / "designs.csv"),
            "fronts_by": pd.read_csv(folder / f"pareto_by_{front_by}.csv"), "front_by": front_by}


def _limits(study: dict) -> list[Limit]:
    """A budget and a deadline inside the range of the study's front (so both lines cross the points)."""
    p = study["pareto"]
    return [limit_for("capex_usd", "<=", float(p["capex_usd"].median())),
            limit_for("time_to_train_s", "<=", float(p["time_to_train_s"].median()))]


@pytest.fixture(scope="module")
def fabrics() -> dict:
    study = _study(FABRICS, "family")
    study["limits"] = _limits(study)
    return study


@pytest.fixture(scope="module")
def fabrics_page(fabrics: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fabrics_report")
    paths = write_report(out, pareto=fabrics["pareto"], designs=fabrics["designs"], strategies=None,
                         fronts_by=fabrics["fronts_by"], front_by="family", limits=fabrics["limits"],
                         title="gpt1t fabrics")
    assert paths == [out / "report.html", out / "pareto.png"]
    return out / "report.html"


def _values(v) -> list:  # noqa: ANN001 - a JSON value
    """A trace's array as a list: plotly writes numeric arrays as base64 typed arrays (dtype, bdata)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def _newplot_data(page: str, div_id: str) -> tuple[list[dict], dict]:
    """The traces and layout that the page passes to Plotly.newPlot for the div `div_id`."""
    m = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div_id) + r'",\s*', page)
    assert m, f"no Plotly.newPlot call for #{div_id}"
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(page, m.end())
    rest = page[end:].lstrip()
    assert rest.startswith(",")
    layout, _ = decoder.raw_decode(rest[1:].lstrip())
    return data, layout


class _Dom(HTMLParser):
    """Counts, in a (dumped) page, the scatter points inside #front-plot's .scatterlayer, the rendered
    plotly figures inside .panel divs, and collects the cells of #front-table's body rows."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str, str]] = []  # (tag, id, class) of open elements
        self.front_points = 0
        self.rendered_panels = 0
        self.rows: list[list[str]] = []

    def _inside(self, *, id_: str | None = None, cls: str | None = None) -> bool:
        return any((id_ is not None and i == id_) or (cls is not None and cls in c.split()) for _, i, c in self.stack)

    def handle_starttag(self, tag, attrs):  # noqa: ANN001 - HTMLParser signature
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "path" and "point" in classes and self._inside(id_="front-plot") and self._inside(cls="scatterlayer"):
            self.front_points += 1
        if tag == "div" and "plot-container" in classes and self._inside(cls="panel"):
            self.rendered_panels += 1
        if tag == "tr" and self._inside(id_="front-table") and any(t == "tbody" for t, _, _ in self.stack):
            self.rows.append([])
        if tag == "td" and self.rows and self._inside(id_="front-table"):
            self.rows[-1].append(a.get("data-value") or "")
        if tag not in self.VOID:
            self.stack.append((tag, a.get("id") or "", " ".join(classes)))

    def handle_startendtag(self, tag, attrs):  # noqa: ANN001 - HTMLParser signature
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):  # noqa: ANN001 - HTMLParser signature
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                return


def _parse(page: str) -> _Dom:
    dom = _Dom()
    dom.feed(page)
    dom.close()
    return dom


# ---- the page's text ----------------------------------------------------------------------------------

def test_page_is_self_contained(fabrics_page: Path):
    page = fabrics_page.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "every script is inline"
    assert not re.search(r"<link\b", page, re.I), "no external stylesheet or resource link"
    assert not re.search(r"url\(\s*['\"]?https?://", page, re.I), "no CSS fetch"
    assert "Plotly.newPlot" in page and "plotly.js" in page.lower()  # plotly.js itself is embedded


def test_plot_data_holds_every_front_point_with_its_details(fabrics: dict, fabrics_page: Path):
    page = fabrics_page.read_text(encoding="utf-8")
    data, layout = _newplot_data(page, "front-plot")
    fronts = fabrics["fronts_by"]
    groups = sorted(fronts["front_group"].unique())
    front_traces = [t for t in data if t.get("customdata")]
    assert [t["name"].split(" (")[0] for t in front_traces] == [f"family {g}" for g in groups]
    for g, trace in zip(groups, front_traces):
        rows = fronts[fronts["front_group"] == g]
        assert sorted(trace["customdata"]) == sorted(rows["design_id"])
        assert sorted(_values(trace["x"])) == pytest.approx(sorted(rows["capex_usd"] / 1e6))
        assert sorted(_values(trace["y"])) == pytest.approx(sorted(rows["time_to_train_days"]))
        assert trace["line"]["shape"] == "hv"  # step line
        assert len(trace["text"]) == len(rows)
        for d, label in zip(trace["customdata"], trace["text"]):
            r = rows[rows["design_id"] == d].iloc[0]
            assert label in ("", f"{r['platform']}, {int(r['n_gpus']):,} GPUs")
    # every (platform, GPU count) of the fronts is written on the plot (once where points share it)
    shown = {label for t in front_traces for label in t["text"] if label}
    assert shown == {f"{p}, {int(n):,} GPUs" for p, n in zip(fronts["platform"], fronts["n_gpus"])}
    # the overall front's designs are all on the page too
    assert set(fabrics["pareto"]["design_id"]) <= {d for t in front_traces for d in t["customdata"]}
    styles = {(t["marker"]["symbol"], t["line"]["dash"]) for t in front_traces}
    assert len(styles) == len(front_traces)
    feasible = fabrics["designs"]["best_time_to_train_s"].notna().sum()
    candidates = [t for t in data if str(t.get("name", "")).startswith("candidate designs")]
    assert len(candidates) == 1 and len(_values(candidates[0]["x"])) == feasible
    # buttons switch each axis between linear and log
    relayouts = [b["args"][0] for menu in layout["updatemenus"] for b in menu["buttons"]]
    for axis in ("xaxis", "yaxis"):
        assert {r[f"{axis}.type"] for r in relayouts if f"{axis}.type" in r} == {"linear", "log"}
        (as_log,) = [r for r in relayouts if r.get(f"{axis}.type") == "log"]
        ticks = as_log[f"{axis}.tickvals"]
        values = [v for t in front_traces for v in _values(t[axis[0]])]
        assert min(ticks) <= max(values) and max(ticks) >= min(values)  # labels where the points are
    assert "million USD" in layout["xaxis"]["title"]["text"] and "days" in layout["yaxis"]["title"]["text"]


def test_plot_and_page_hold_the_limits(fabrics: dict, fabrics_page: Path):
    page = fabrics_page.read_text(encoding="utf-8")
    data, _ = _newplot_data(page, "front-plot")
    by_name = {t.get("name"): t for t in data}
    for lim in fabrics["limits"]:
        name = html.escape(lim.label)  # plotly reads names as HTML
        assert name in by_name, f"no line for {lim.label}"
        line = by_name[name]
        if lim.axis == "capex_usd":
            assert _values(line["x"]) == pytest.approx([lim.value / 1e6] * 2)
        else:
            assert _values(line["y"]) == pytest.approx([lim.value] * 2)
        assert f"data-axis='{lim.axis}'" in page and html.escape(lim.label) in page
    deadline = [lim for lim in fabrics["limits"] if lim.axis == "time_to_train_days"][0]
    assert deadline.value == pytest.approx(fabrics["pareto"]["time_to_train_s"].median() / 86400)


def test_hover_text_has_bom_capex_split_power_strategy_and_breakdown(fabrics: dict):
    for _, r in fabrics["pareto"].iterrows():
        text = hover_text(r)
        assert r["design_id"] in text
        for col in ("switch_count", "transceiver_count", "nic_count", "n_tiers", "family", "nic", "switch"):
            assert f"{col} {r[col]}" in text
        assert f"compute ${r['compute_capex_usd'] / 1e6:,.2f}M" in text
        assert f"network ${r['network_capex_usd'] / 1e6:,.2f}M" in text
        assert f"{r['power_w'] / 1e6:,.2f} MW" in text
        for col in ("tp", "pp", "dp", "ep", "cp"):
            assert f"{col}{r[col]}" in text
        assert f"mbs{r['microbatch_size']}" in text and str(r["schedule"]) in text
        assert f"ZeRO-{r['zero_stage']}" in text and f"recompute {r['recompute']}" in text
        for col, name in BREAKDOWN_COLUMNS:
            assert f"{name} {r[col]:.3g}" in text


def test_table_holds_the_front(fabrics: dict, fabrics_page: Path):
    dom = _parse(fabrics_page.read_text(encoding="utf-8"))
    fronts = fabrics["fronts_by"]
    assert len(dom.rows) == len(fronts)
    # cells: front, rank, design, ...; the design column is the third
    assert sorted(r[2] for r in dom.rows) == sorted(fronts["design_id"])
    assert sorted(r[0] for r in dom.rows) == sorted(f"family {g}" for g in fronts["front_group"])


def test_strategy_panels_without_breakdown_in_the_strategy_table(fabrics: dict):
    """Today's strategy table (STRATEGY_TRIAL_COLUMNS) has no breakdown columns: each front design's panel
    shows its front strategy."""
    assert not any(c in STRATEGY_TRIAL_COLUMNS for c, _ in BREAKDOWN_COLUMNS)
    fronts = fabrics["fronts_by"]
    strategies = pd.DataFrame({c: fronts[c] if c in fronts else 0 for c in STRATEGY_TRIAL_COLUMNS})
    page = report_html(pareto=fabrics["pareto"], designs=fabrics["designs"], strategies=strategies,
                       fronts_by=fronts, front_by="family", limits=[], title="t")
    design_ids = set(fronts["design_id"]) | set(fabrics["pareto"]["design_id"])
    assert len(re.findall(r"<div class='panel' id='panel-", page)) == len(design_ids)
    for k in range(len(design_ids)):
        data, _ = _newplot_data(page, f"strategies-{k}")
        bars = [t for t in data if t["type"] == "bar"]
        assert [t["name"] for t in bars] == [name for _, name in BREAKDOWN_COLUMNS]
        assert all(len(_values(t["x"])) == 1 for t in bars)  # the design's one front strategy
    assert "no per-strategy time" in page


def test_strategy_panels_show_the_fastest_strategies_when_the_table_has_the_breakdown(fabrics: dict):
    """A strategy table with breakdown columns: a panel shows that design's fastest feasible strategies,
    at most MAX_STRATEGIES_PER_DESIGN, fastest first."""
    front = fabrics["pareto"].head(2)
    rows = []
    n = MAX_STRATEGIES_PER_DESIGN + 5
    for _, r in front.iterrows():
        for k in range(n):
            scale = 1.0 + (n - k) / 10  # listed slowest first
            rows.append({**{c: r[c] for c in ("design_id", "tp", "pp", "dp", "ep", "cp", "microbatch_size",
                                              "schedule", "zero_stage", "recompute")},
                         "feasible": k % 7 != 3, "time_to_train_s": r["time_to_train_s"] * scale,
                         "iteration_time_s": r["iteration_time_s"] * scale,
                         **{c: r[c] * scale for c, _ in BREAKDOWN_COLUMNS}})
    strategies = pd.DataFrame(rows)
    page = report_html(pareto=front, designs=fabrics["designs"].iloc[0:0], strategies=strategies, fronts_by=None,
                       front_by=None, limits=[], title="t")
    for k, design_id in enumerate(front.sort_values("capex_usd")["design_id"]):
        mine = strategies[(strategies["design_id"] == design_id) & strategies["feasible"]]
        want = sorted(mine["compute_s"])[:MAX_STRATEGIES_PER_DESIGN]
        data, _ = _newplot_data(page, f"strategies-{k}")
        compute = next(t for t in data if t["name"] == "compute")
        assert _values(compute["x"]) == pytest.approx(want)


def test_empty_front_still_writes_both_files(tmp_path: Path, fabrics: dict):
    pareto = fabrics["pareto"].iloc[0:0]
    paths = write_report(tmp_path, pareto=pareto, designs=fabrics["designs"].iloc[0:0], strategies=None,
                         fronts_by=None, front_by=None, limits=fabrics["limits"], title="no front")
    assert all(p.stat().st_size > 0 for p in paths)


# ---- a real browser -----------------------------------------------------------------------------------

def _chromium() -> str:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if exe is None:
        pytest.fail(f"chromium is not installed; the report's browser test needs it: {CHROMIUM_INSTALL}")
    return exe


def _render(page: Path) -> tuple[int, str, str]:
    """(exit status, dumped DOM, console lines) of headless Chromium loading `page`. Host names resolve
    to nothing, so a page that fetched anything would fail to render (and log the failure)."""
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000", "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom",
         page.resolve().as_uri()],
        capture_output=True, text=True, timeout=180)
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    return proc.returncode, proc.stdout, "\n".join(console)


def test_browser_console_detection_sees_errors(tmp_path: Path):
    """The console check below is meaningful: a page that throws shows up in Chromium's stderr."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>notDefinedAnywhere();</script></body></html>")
    rc, _, console = _render(bad)
    assert rc == 0 and "Uncaught" in console and "notDefinedAnywhere" in console


def test_browser_renders_the_page_without_console_messages(fabrics: dict, fabrics_page: Path):
    rc, dom_text, console = _render(fabrics_page)
    assert rc == 0
    assert console == "", f"JavaScript console output:\n{console}"
    dom = _parse(dom_text)
    n_front = len(fabrics["fronts_by"])
    n_candidates = int(fabrics["designs"]["best_time_to_train_s"].notna().sum())
    assert dom.front_points == n_front + n_candidates
    n_designs = len(set(fabrics["fronts_by"]["design_id"]) | set(fabrics["pareto"]["design_id"]))
    assert dom.rendered_panels == n_designs


def test_browser_table_sorts_and_axis_buttons_switch_scales(fabrics_page: Path, tmp_path: Path):
    """Clicks, in Chromium, a table header and the 'capex: linear' and 'time: log' buttons; the table is
    then sorted by that column and the plot's axes have the clicked types."""
    header = "time to train (days)"
    clicks = """<script>
    Array.prototype.forEach.call(document.querySelectorAll('#front-table th'), function (th) {
      if (th.textContent === HEADER) th.click(); });
    window.addEventListener('load', function () {
      var gd = document.getElementById('front-plot');
      Array.prototype.forEach.call(gd.querySelectorAll('g.updatemenu-button'), function (b) {
        if (b.textContent === 'capex: linear' || b.textContent === 'time: log')
          b.dispatchEvent(new MouseEvent('click', {bubbles: true}));
      });
      setTimeout(function () {
        document.body.setAttribute('data-axis-types', gd._fullLayout.xaxis.type + ' ' + gd._fullLayout.yaxis.type);
      }, 1000);
    });
    </script>""".replace("HEADER", json.dumps(header))
    page = fabrics_page.read_text(encoding="utf-8")
    clicked = tmp_path / "report_clicked.html"
    clicked.write_text(page.replace("</body>", clicks + "</body>"), encoding="utf-8")
    heads = re.findall(r"<th data-type='\w+'>([^<]*)</th>", page)
    col = heads.index(header)
    original = [float(r[col]) for r in _parse(page).rows]
    assert original != sorted(original)  # the fronts are listed one after another, so the click reorders
    _, layout = _newplot_data(page, "front-plot")
    assert (layout["xaxis"]["type"], layout["yaxis"]["type"]) != ("linear", "log")  # the clicks change them
    rc, dom_text, console = _render(clicked)
    assert rc == 0 and console == "", console
    assert [float(r[col]) for r in _parse(dom_text).rows] == sorted(original)
    assert re.search(r'data-axis-types="linear log"', dom_text), "the axis buttons did not switch the scales"


# ---- pareto.png ---------------------------------------------------------------------------------------

def _series_lines(ax, names: list[str]) -> list:
    return [ln for ln in ax.get_lines() if ln.get_label().split(" (")[0] in names]


@pytest.mark.parametrize("folder, front_by", [(FABRICS, "family"), (HEADLINE, "family")])
def test_png_series_have_distinct_markers_and_line_styles(folder: Path, front_by: str):
    study = _study(folder, front_by)
    limits = _limits(study)
    fig = front_figure(pareto=study["pareto"], designs=study["designs"], fronts_by=study["fronts_by"],
                       front_by=front_by, limits=limits, title="t")
    ax = fig.axes[0]
    groups = sorted(study["fronts_by"]["front_group"].unique())
    names = [f"{front_by} {g}" for g in groups]
    lines = _series_lines(ax, names)
    assert [ln.get_label().split(" (")[0] for ln in lines] == names
    assert len({(ln.get_marker(), ln.get_linestyle()) for ln in lines}) == len(names)
    for g, ln in zip(groups, lines):
        rows = study["fronts_by"][study["fronts_by"]["front_group"] == g]
        assert sorted(ln.get_xdata()) == pytest.approx(sorted(rows["capex_usd"] / 1e6))
    for lim in limits:
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == lim.label]
        data = line.get_xdata() if lim.axis == "capex_usd" else line.get_ydata()
        want = lim.value / 1e6 if lim.axis == "capex_usd" else lim.value
        assert list(data) == pytest.approx([want, want])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("candidate designs") for t in legend)
    labels = [t.get_text() for t in ax.texts]
    assert labels and all(any(f"{p}, {int(n):,} GPUs" == t for p, n in zip(study["fronts_by"]["platform"],
                                                                            study["fronts_by"]["n_gpus"]))
                          for t in labels)
    assert "million USD" in ax.get_xlabel() and "days" in ax.get_ylabel()


def test_png_has_no_candidate_entry_without_candidates(fabrics: dict, tmp_path: Path):
    designs = fabrics["designs"].assign(best_time_to_train_s=float("nan"))
    fig = front_figure(pareto=fabrics["pareto"], designs=designs, fronts_by=None, front_by=None,
                       limits=fabrics["limits"], title="t")
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any(t.startswith("candidate designs") for t in legend)
    assert len(_series_lines(ax, ["Pareto front"])) == 1
    fig.savefig(tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_limit_rejects_unknown_axes_and_bad_values():
    with pytest.raises(ValueError, match="axis"):
        Limit("power_w", 1.0, "power")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        Limit("capex_usd", float("nan"), "budget")
    assert limit_for("power_w", "<=", 2.5e7) is None  # not a plot axis
    assert limit_for("time_to_train_s", "<=", 86400.0 * 60).value == pytest.approx(60.0)
