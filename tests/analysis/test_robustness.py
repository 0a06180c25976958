"""designer.analysis.robustness and designer.robustness_plot against hand calculations, the real
solver's designs, and a brute-force loop over the draws with moocore and answer_goal.

Oracles, never the module's own output:
  * bills of materials counted by hand (closed-form relations of topology.py, written out below) and
    the catalog's sourced prices (designer/data/catalog.yaml);
  * the design's capex as the MILP and the closed form priced it (NetworkDesign.capex_usd);
  * probabilities of small cases computed by hand (uniform and triangular CDFs, written out);
  * per draw, moocore.is_nondominated (the front) and designer.search.goal.answer_goal (the goal).
"""

from __future__ import annotations

import math

import moocore
from matplotlib.container import BarContainer
import numpy as np
import pytest

from designer.analysis.robustness import (
    PriceExposure,
    PriceRange,
    PriceTerm,
    as_price_ranges,
    candidate_mask,
    band_ranges,
    draw_prices,
    exposure_matrix,
    front_mask,
    goal_candidate_mask,
    goal_optimum,
    price_exposure,
    robustness,
)
from designer.errors import SpecError
from designer.network.api import solve_network
from designer.pareto import nondominated_mask
from designer.robustness_plot import COLUMNS, plot_robustness, robustness_figure, robustness_frame
from designer.search.goal import DesignPoint, answer_goal
from designer.spec.catalog import load_catalog
from designer.spec.network_study import NetworkStudy, study_catalog
from designer.spec.study import Goal

H100 = [{"id": "cx7_400g", "nics_per_gpu": [1]}]


def study(families, platforms, nics, switches, count, *, nic_links="dac", multipliers=None, ratios=(3.0,),
          spares=None) -> NetworkStudy:
    data = {"catalog": {"price_multipliers": multipliers or {}},
            "choices": {"platforms": platforms, "nics": nics, "switches": [{"id": s} for s in switches],
                        "families": families, "oversubscription": list(ratios), "media": {"nic_links": nic_links}},
            "gpus": {"count": count}}
    if spares is not None:
        data["spares"] = spares
    return NetworkStudy.model_validate(data)


def solved(st: NetworkStudy):
    cat = study_catalog(st)
    return solve_network(st, catalog=cat).design, cat


# Several families, platforms, media and NIC sharing; one with price multipliers, one with spares.
CASES = {
    "rail-optimized-2048": study(["rail-optimized"], ["hgx_h100_8"], H100, ["qm9790"], 2048),
    "rail-only-optic": study(["rail-only"], ["hgx_h100_8"], H100, ["qm9790"], 4096, nic_links="optic"),
    "oversubscribed-3tier": study(["oversubscribed"], ["hgx_h100_8"], H100, ["qm9790"], 8192),
    "fat-tree-nvl72-multipliers": study(["fat-tree"], ["gb200_nvl72"], H100, ["sn5600"], 72 * 40,
                                        multipliers={"switches": 0.7, "all": 0.9}),
    "shared-nic-choice": study(["rail-optimized", "rail-only"], ["hgx_h100_8"],
                               [{"id": "cx7_400g", "nics_per_gpu": [0.5, 1]}], ["sn5600"], 1024, nic_links="choose"),
    "rail-only-spares": study(["rail-only"], ["hgx_h100_8"], H100, ["qm9790"], 1024, spares={"confidence": 0.999}),
}


@pytest.fixture(scope="module")
def designs():
    return {name: solved(st) for name, st in CASES.items()}


# ---------------------------------------------------------------------------------------------
# 1. Exposure: quantities over catalog ids, reproducing the solver's capex
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_exposure_reproduces_the_solver_capex(designs, name):
    d, cat = designs[name]
    e = price_exposure(d, cat)
    assert e.capex_at({}) == pytest.approx(d.capex_usd, rel=1e-9, abs=0)
    # The same through the matrix the analysis multiplies.
    _, point, q, rest = exposure_matrix([e])
    assert float(point @ q[:, 0] + rest[0]) == pytest.approx(d.capex_usd, rel=1e-9, abs=0)
    ids = {t.entry_id for t in e.terms}
    assert {d.platform, d.switch} <= ids
    # A NIC term exactly when the design pays for NICs (a platform may include them in its price).
    assert (d.nic in ids) == (d.nic_capex_usd > 0)


def test_exposure_counted_by_hand(designs):
    d, cat = designs["rail-optimized-2048"]
    e = price_exposure(d, cat)
    # 2,048 H100 in 8-GPU domains: D = 256 hgx_h100_8. One NIC per GPU: one plane of E = 2,048
    # endpoints; QM9790 radix 64, h = 32; 2,048 <= 2 * 32^2, so two tiers. Rail-pure leaves, D = 256 > h:
    # 8 rails x ceil(256 / 32) = 64 leaves; spines ceil(2,048 / 64) = 32: 96 switches.
    # Links: 2,048 NIC-leaf and 2,048 leaf-spine. A cable (DAC, AOC, active copper) is bought per link,
    # a transceiver per link end (two per link); a module serves ports_per_module of them. An optical
    # NIC link named "switch module+NIC module" has one end of each.
    assert d.n_tiers == 2
    want: dict[str, float] = {"hgx_h100_8": 256, "qm9790": 96}
    for links, name in zip((2048, 2048), d.link_media):
        ends = name.split("+")
        if len(ends) == 2:
            for mid in ends:
                want[mid] = want.get(mid, 0) + links / cat.medium(mid).ports_per_module
            continue
        m = cat.medium(name)
        n_ends = 1 if m.kind.value in ("dac", "aoc", "copper_active") else 2
        want[m.id] = want.get(m.id, 0) + links * n_ends / m.ports_per_module
    if d.nic_capex_usd > 0:  # hgx_h100_8's price excludes its NICs: 2,048 bought
        want["cx7_400g"] = 2048
    assert {t.entry_id: t.quantity for t in e.terms} == want
    # The capex at the catalog's prices (catalog.yaml), summed here by hand.
    price = {t.entry_id: t.price_usd for t in e.terms}
    assert price == {i: (cat.platform(i).price_usd if i == "hgx_h100_8" else cat.switch(i).price_usd if i == "qm9790"
                         else cat.nic(i).price_usd if i == "cx7_400g" else cat.medium(i).price_usd) for i in want}
    assert e.capex_at({}) == pytest.approx(sum(want[i] * price[i] for i in want), rel=1e-12)
    # Ten percent on the switch alone: + 0.1 x 96 x the switch price.
    assert e.capex_at({"qm9790": price["qm9790"] * 1.1}) == pytest.approx(
        d.capex_usd + 9.6 * price["qm9790"], rel=1e-12)


def test_exposure_respects_the_catalog_multipliers(designs):
    d, cat = designs["fat-tree-nvl72-multipliers"]
    e = price_exposure(d, cat)
    price = {t.entry_id: t.price_usd for t in e.terms}
    plain = load_catalog()
    # Multipliers switches 0.7 and all 0.9 on the shipped catalog's prices.
    assert price["sn5600"] == pytest.approx(plain.switch("sn5600").price_usd * 0.7 * 0.9, rel=1e-12)
    assert price["gb200_nvl72"] == pytest.approx(plain.platform("gb200_nvl72").price_usd * 0.9, rel=1e-12)
    # The shipped catalog without the multipliers did not price this design: refused, one line.
    with pytest.raises(SpecError, match="pass the catalog it was priced with") as err:
        price_exposure(d, plain)
    assert "\n" not in str(err.value)


def test_exposure_leaves_out_nics_the_platform_includes(designs):
    d, cat = designs["rail-optimized-2048"]
    nic_usd = cat.nic("cx7_400g").price_usd
    assert d.nic_capex_usd == 2048 * nic_usd  # the platform's price excludes its NICs

    def priced(n_paid: float):
        """The same design priced as if the platform's price included 2,048 - n_paid of its NICs."""
        cut = (2048 - n_paid) * nic_usd
        upd = {"nic_capex_usd": n_paid * nic_usd, "network_capex_usd": d.network_capex_usd - cut,
               "capex_usd": d.capex_usd - cut}
        if "priced_nic_count" in type(d).model_fields:
            upd["priced_nic_count"] = float(n_paid)
        return d.model_copy(update=upd)

    # All included: no NIC term, and the capex still reproduced (the platform term carries them).
    e = price_exposure(priced(0), cat)
    assert "cx7_400g" not in {t.entry_id for t in e.terms}
    assert e.capex_at({}) == pytest.approx(d.capex_usd - 2048 * nic_usd, rel=1e-12)
    # Half of them included: a NIC term of 1,024.
    assert {t.entry_id: t.quantity for t in price_exposure(priced(1024), cat).terms}["cx7_400g"] == 1024
    # NIC capex that is no whole number of NICs at this catalog's price: another catalog priced it.
    odd = d.model_copy(update={"nic_capex_usd": d.nic_capex_usd * 0.9, "capex_usd": d.capex_usd - 0.1 * d.nic_capex_usd})
    with pytest.raises(SpecError, match="pass the catalog it was priced with"):
        price_exposure(odd, cat)


def test_exposure_pays_for_the_spares(designs):
    d, cat = designs["rail-only-spares"]
    assert d.spare_domains > 0  # the availability model asks for spares at this size
    q = {t.entry_id: t.quantity for t in price_exposure(d, cat).terms}
    assert q["hgx_h100_8"] == d.n_domains == d.job_domains + d.spare_domains


# ---------------------------------------------------------------------------------------------
# 2. Hand-made cases with probabilities computed by hand
# ---------------------------------------------------------------------------------------------


def hand_designs():
    """A and B equally fast (10 s); C slower (20 s). A costs p_x (q = 1), B a fixed 1.3 (id f), C
    0.5 p_x + 0.4 (a fixed rest)."""
    a = PriceExposure(design_id="A", label="A", family="f", platform="p", n_gpus=8, capex_usd=1.5,
                      terms=(PriceTerm(entry_id="x", section="switches", quantity=1.0, price_usd=1.5),))
    b = PriceExposure(design_id="B", label="B", family="f", platform="p", n_gpus=8, capex_usd=1.3,
                      terms=(PriceTerm(entry_id="f", section="nics", quantity=1.0, price_usd=1.3),))
    c = PriceExposure(design_id="C", label="C", family="f", platform="p", n_gpus=8, capex_usd=1.15, rest_usd=0.4,
                      terms=(PriceTerm(entry_id="x", section="switches", quantity=0.5, price_usd=1.5),))
    return [a, b, c], np.array([10.0, 10.0, 20.0])


N_HAND = 200_000


def close(p: float, want: float) -> None:
    """Within 4.5 standard errors of a proportion over N_HAND draws."""
    assert abs(p - want) <= max(4.5 * math.sqrt(want * (1 - want) / N_HAND), 1e-12), (p, want)


@pytest.mark.parametrize("dist", ["uniform", "triangular"])
def test_hand_case_front(dist):
    exps, t = hand_designs()
    r = robustness(exps, t, {"x": PriceRange(low_usd=1.0, mode_usd=1.5, high_usd=2.0, distribution=dist)},
                   samples=N_HAND, seed=7)
    # F(v) = P(p_x <= v). Uniform on [1, 2]: v - 1. Triangular (1, 1.5, 2): (v - 1)^2 / 0.5 below the
    # mode, 1 - (2 - v)^2 / 0.5 above it.
    F = (lambda v: v - 1) if dist == "uniform" else (lambda v: (v - 1) ** 2 / 0.5 if v <= 1.5 else 1 - (2 - v) ** 2 / 0.5)
    # A and B tie on time: the cheaper is on the front: A iff p_x < 1.3.
    close(r.design("A").p_on_front, F(1.3))  # 0.3 uniform; 0.18 triangular
    close(r.design("B").p_on_front, 1 - F(1.3))
    # C is slower: on the front iff 0.5 p_x + 0.4 < min(p_x, 1.3); p_x > 0.8 always, so iff p_x < 1.8.
    close(r.design("C").p_on_front, F(1.8))  # 0.8 uniform; 0.92 triangular
    assert r.p_goal_unmet is None and r.design("A").p_optimum is None
    # Capex quantiles of A = p_x: uniform 1 + u; triangular 1 + sqrt(0.5 u) below the mode.
    qa = (1.05, 1.5, 1.95) if dist == "uniform" else (1 + math.sqrt(0.025), 1.5, 2 - math.sqrt(0.025))
    got = (r.design("A").capex_p5_usd, r.design("A").capex_p50_usd, r.design("A").capex_p95_usd)
    assert got == pytest.approx(qa, abs=0.006)
    assert (r.design("B").capex_p5_usd, r.design("B").capex_p95_usd) == (1.3, 1.3)
    assert r.price_ids == ("x",) and r.fixed_price_ids == ("f",)
    # At point prices (p_x = 1.5): A 1.5 > B 1.3, so B and C (1.15) are the front.
    assert [d.on_point_front for d in r.designs] == [False, True, True]


def test_hand_case_goals():
    exps, t = hand_designs()
    rng = {"x": PriceRange(low_usd=1.0, mode_usd=1.5, high_usd=2.0, distribution="uniform")}
    # Fastest under capex <= 1.25: B (1.3) never qualifies; A (t = 10) iff p_x <= 1.25 (P 0.25); else C
    # iff 0.5 p_x + 0.4 <= 1.25, p_x <= 1.7 (P 0.45); else nothing (P 0.3).
    g = Goal.model_validate({"minimize": "time_to_train_s", "subject_to": {"capex_usd": "<= 1.25"}})
    r = robustness(exps, t, rng, samples=N_HAND, seed=11, goal=g)
    close(r.design("A").p_optimum, 0.25)
    assert r.design("B").p_optimum == 0.0
    close(r.design("C").p_optimum, 0.45)
    close(r.p_goal_unmet, 0.30)
    # Cheapest: C < A always; C < B = 1.3 iff p_x < 1.8 (P 0.8).
    r = robustness(exps, t, rng, samples=N_HAND, seed=11, goal=Goal(minimize="capex_usd"))
    assert r.design("A").p_optimum == 0.0
    close(r.design("C").p_optimum, 0.8)
    close(r.design("B").p_optimum, 0.2)
    assert r.p_goal_unmet == 0.0
    # Fastest with no limit: A or B, whichever is cheaper (the tie on time goes to capex): as the front.
    r = robustness(exps, t, rng, samples=N_HAND, seed=11, goal=Goal(minimize="time_to_train_s"))
    close(r.design("A").p_optimum, 0.3)
    close(r.design("B").p_optimum, 0.7)


def test_draws_follow_the_distributions():
    ranges = [PriceRange(low_usd=10, mode_usd=10, high_usd=30, distribution="triangular"),
              PriceRange(low_usd=2, mode_usd=5, high_usd=6, distribution="uniform"),
              PriceRange(low_usd=4, mode_usd=4, high_usd=4, distribution="triangular")]
    p = draw_prices(ranges, 100_000, np.random.default_rng(3))
    # Triangular (10, 10, 30): mean (10 + 10 + 30) / 3 = 16.67; P(x <= 20) = 1 - (30 - 20)^2 / (20 x 20) = 0.75.
    assert p[:, 0].mean() == pytest.approx(50 / 3, abs=0.05)
    assert np.mean(p[:, 0] <= 20) == pytest.approx(0.75, abs=0.006)
    # Uniform on [2, 6]: mean 4, P(x <= 3) = 0.25, never outside.
    assert p[:, 1].mean() == pytest.approx(4.0, abs=0.02) and np.mean(p[:, 1] <= 3) == pytest.approx(0.25, abs=0.006)
    assert p[:, :2].min(axis=0).tolist() >= [10, 2] and p[:, :2].max(axis=0).tolist() <= [30, 6]
    assert np.all(p[:, 2] == 4.0)  # zero width: the point price
    # Columns are independent: correlation near 0 (standard error 1 / sqrt(n) = 0.003).
    assert abs(np.corrcoef(p[:, 0], p[:, 1])[0, 1]) < 0.015


# ---------------------------------------------------------------------------------------------
# 3. Brute force per draw: moocore and answer_goal
# ---------------------------------------------------------------------------------------------


def random_case(seed: int, n_designs: int = 14, n_ids: int = 6):
    """Random exposures with shared ids, tied times, and one exact duplicate (same exposure, same time)
    of the fastest design."""
    g = np.random.default_rng(seed)
    ids = [f"id{k}" for k in range(n_ids)]
    point = g.uniform(1.0, 100.0, n_ids)
    exps = []
    for j in range(n_designs):
        use = g.random(n_ids) < 0.6
        terms = tuple(PriceTerm(entry_id=ids[k], section="switches", quantity=float(g.integers(1, 50)),
                                price_usd=float(point[k])) for k in range(n_ids) if use[k])
        e = PriceExposure(design_id=f"d{j:02d}", label=f"d{j}", family="f", platform="p", n_gpus=8, capex_usd=0.0,
                          terms=terms, rest_usd=float(g.uniform(0, 500)))
        exps.append(e.model_copy(update={"capex_usd": e.capex_at({})}))
    times = g.choice([100.0, 150.0, 200.0, 250.0, 300.0], size=n_designs)
    times[3] = 50.0  # the fastest alone: always on the front, and its duplicate never
    exps.append(exps[3].model_copy(update={"design_id": "dup3"}))  # after d03 in input order
    times = np.append(times, times[3])
    ranges = {i: PriceRange(low_usd=p * 0.7, mode_usd=p, high_usd=p * 1.4,
                            distribution="triangular" if k % 2 else "uniform")
              for k, (i, p) in enumerate(zip(ids, point)) if k != n_ids - 1}  # the last id fixed
    return exps, times, ranges


def sampled_capex(exps, ranges, samples, seed):
    ids, _, _, _ = exposure_matrix(exps)
    drawn = [i for i in ids if i in ranges]
    prices = draw_prices([ranges[i] for i in drawn], samples, np.random.default_rng(seed))
    # Per draw and per design, the exposure's own sum (no matrix product).
    return np.array([[e.capex_at(dict(zip(drawn, row))) for e in exps] for row in prices])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_front_mask_equals_moocore_per_draw(seed):
    exps, times, ranges = random_case(seed)
    capex = sampled_capex(exps, ranges, 400, seed)
    # With tied times, and with every time distinct (the duplicate then slower than d03).
    for t in (times, times + np.arange(len(times)) * 1e-3):
        mask = front_mask(capex, t)
        # moocore keeps the first of duplicated points (keep_weakly=False), as designer.pareto does.
        want = np.array([moocore.is_nondominated(np.column_stack([row, t])) for row in capex])
        assert np.array_equal(mask, want)
        assert mask[:, 3].all() and not mask[:, -1].any()  # d03 always, the duplicate after it never


@pytest.mark.parametrize("seed", [0, 1])
def test_robustness_equals_a_brute_force_loop(seed):
    exps, t, ranges = random_case(seed)
    power = np.random.default_rng(seed + 100).uniform(1e6, 2e6, len(exps))
    samples = 1500
    capex = sampled_capex(exps, ranges, samples, seed)
    front = np.array([moocore.is_nondominated(np.column_stack([row, t])) for row in capex])
    budget = float(np.median(capex))
    goals = [Goal.model_validate({"minimize": "time_to_train_s", "subject_to": {"capex_usd": f"<= {budget}"}}),
             Goal(minimize="capex_usd"),
             Goal.model_validate({"minimize": "energy_mwh", "subject_to": {"capex_usd": f"<= {budget * 1.1}",
                                                                           "time_to_train_s": "<= 250"}})]
    for goal in goals:
        r = robustness(exps, t, ranges, samples=samples, seed=seed, goal=goal, power_w=power)
        answers = []
        for row in capex:
            pts = [DesignPoint(e.design_id, e.label, e.family, e.platform, e.n_gpus, float(c), float(p), float(tt))
                   for e, c, p, tt in zip(exps, row, power, t)]
            a = answer_goal(goal, pts)
            answers.append(a.answer.design_id if a.met else None)
        for j, e in enumerate(exps):
            d = r.designs[j]
            assert d.p_on_front == front[:, j].sum() / samples
            assert d.p_optimum == sum(a == e.design_id for a in answers) / samples
            assert (d.capex_p5_usd, d.capex_p50_usd, d.capex_p95_usd) == pytest.approx(
                tuple(np.percentile(capex[:, j], [5, 50, 95])), rel=1e-12)
        assert r.p_goal_unmet == sum(a is None for a in answers) / samples
        point_front = moocore.is_nondominated(np.column_stack([[e.capex_usd for e in exps], t]))
        assert r.p_same_front == np.mean(np.all(front == point_front, axis=1))


def test_goal_optimum_ties_follow_answer_goal():
    # Equal capex and equal time: the lesser design_id ("a" before "b"), whatever the input order.
    pts = [DesignPoint("b", "b", "f", "p", 8, 5.0, 1.0, 10.0), DesignPoint("a", "a", "f", "p", 8, 5.0, 1.0, 10.0),
           DesignPoint("c", "c", "f", "p", 8, 5.0, 1.0, 9.0)]
    g = Goal(minimize="capex_usd")
    assert answer_goal(g, pts).answer.design_id == "c"  # the faster at equal capex
    assert goal_optimum(np.array([[5.0, 5.0, 5.0]]), pts, g).tolist() == [2]
    assert goal_optimum(np.array([[5.0, 5.0, 6.0]]), pts, g).tolist() == [1]  # "a"
    assert answer_goal(g, [p if p.design_id != "c" else DesignPoint("c", "c", "f", "p", 8, 6.0, 1.0, 9.0)
                           for p in pts]).answer.design_id == "a"


# ---------------------------------------------------------------------------------------------
# 4. Real designs: point prices, bands, the candidate rule
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    """Cheapest networks of 2,048 GPUs per family and platform (hypothetical times: a faster platform
    and a richer fabric train faster), as a study's candidate pool."""
    out = []
    for fam, plat, days in [("rail-optimized", "hgx_h100_8", 30.0), ("rail-only", "hgx_h100_8", 31.0),
                            ("fat-tree", "hgx_h100_8", 30.0), ("oversubscribed", "hgx_h100_8", 33.0),
                            ("rail-optimized", "hgx_h200_8", 27.0), ("rail-only", "hgx_h200_8", 28.0),
                            ("rail-optimized", "hgx_b200_8", 18.0)]:
        st = study([fam], [plat], [{"id": "cx7_400g", "nics_per_gpu": [1]}], ["qm9790"], 2048)
        d, cat = solved(st)
        out.append((d, cat, days * 86_400.0))
    return out


def test_point_prices_reproduce_the_project_front(pool):
    exps = [price_exposure(d, cat, design_id=f"{d.family.value}/{d.platform}") for d, cat, _ in pool]
    t = np.array([x[2] for x in pool])
    fixed = {i: PriceRange(low_usd=p, mode_usd=p, high_usd=p) for i, p in zip(*exposure_matrix(exps)[:2])}
    r = robustness(exps, t, fixed, samples=50, seed=0)
    want = nondominated_mask(np.column_stack([[d.capex_usd for d, _, _ in pool], t]))
    assert [d.p_on_front for d in r.designs] == [float(w) for w in want]
    assert [d.on_point_front for d in r.designs] == want.tolist()
    assert r.p_same_front == 1.0


def test_band_on_real_designs_against_brute_force(pool):
    exps = [price_exposure(d, cat, design_id=f"{d.family.value}/{d.platform}") for d, cat, _ in pool]
    t = np.array([x[2] for x in pool])
    ranges = band_ranges(exps, 0.2)  # every price off by up to 20 %
    assert set(ranges) == {t_.entry_id for e in exps for t_ in e.terms}
    r = robustness(exps, t, ranges, samples=3000, seed=5)
    capex = sampled_capex(exps, ranges, 3000, 5)
    front = np.array([moocore.is_nondominated(np.column_stack([row, t])) for row in capex])
    assert [d.p_on_front for d in r.designs] == (front.sum(axis=0) / 3000).tolist()
    # Rail-only has rail-optimized's bill at this size (test_candidate_mask_drops_only_...) and is slower:
    # never on the front. Oversubscribed is cheaper and slower than both: on the front at point prices,
    # off it in some draws.
    assert r.design("rail-only/hgx_h100_8").p_on_front == 0.0
    assert r.design("oversubscribed/hgx_h100_8").on_point_front
    assert 0 < r.design("oversubscribed/hgx_h100_8").p_on_front < 1 and r.p_same_front < 1


def test_candidate_mask_drops_only_designs_dominated_in_every_draw(pool):
    exps = [price_exposure(d, cat, design_id=f"{d.family.value}/{d.platform}") for d, cat, _ in pool]
    t = np.array([x[2] for x in pool])
    # At 2,048 GPUs and radix 64 (h = 32) rail-only and rail-optimized count the same: rail-only has 8
    # rail planes of 256 endpoints, each ceil(256 / 32) = 8 leaves + ceil(256 / 64) = 4 spines, 96
    # switches; rail-optimized 64 leaves + 32 spines = 96; the same NICs, DACs and optics. So on one
    # platform the slower rail-only (31 vs 30 days, 28 vs 27) costs the same in every draw: dominated
    # everywhere, left out. Fat-tree also counts the same but is as fast: a duplicate, kept (which of
    # two duplicates a front or a goal keeps is decided per draw). The oversubscribed fabric is
    # cheaper (fewer spines and optics) whatever the prices: kept.
    want = {"rail-optimized/hgx_h100_8": True, "rail-only/hgx_h100_8": False, "fat-tree/hgx_h100_8": True,
            "oversubscribed/hgx_h100_8": True, "rail-optimized/hgx_h200_8": True, "rail-only/hgx_h200_8": False,
            "rail-optimized/hgx_b200_8": True}
    for fraction in (0.05, 0.3):
        ranges = band_ranges(exps, fraction)
        keep = candidate_mask(exps, t, ranges)
        assert dict(zip((e.design_id for e in exps), keep.tolist())) == want
        capex = sampled_capex(exps, ranges, 2000, 9)
        full = front_mask(capex, t)
        assert not full[:, ~keep].any()  # never on a front
        # Leaving them out changes no kept design's front membership, draw by draw.
        assert np.array_equal(front_mask(capex[:, keep], t[keep]), full[:, keep])


def test_candidate_mask_by_hand():
    exps, t = hand_designs()
    extra = [
        # D: as slow as C, costs p_x + 0.1: 0.1 more than A (faster) at every price: left out.
        PriceExposure(design_id="D", label="D", family="f", platform="p", n_gpus=8, capex_usd=1.6, rest_usd=0.1,
                      terms=(PriceTerm(entry_id="x", section="switches", quantity=1.0, price_usd=1.5),)),
        # E: slowest, 1.31 fixed: 0.01 above B (faster) always: left out.
        PriceExposure(design_id="E", label="E", family="f", platform="p", n_gpus=8, capex_usd=1.31, rest_usd=0.01,
                      terms=(PriceTerm(entry_id="f", section="nics", quantity=1.0, price_usd=1.3),)),
        # F: slowest, 1.2 fixed: below B; C = 0.5 p_x + 0.4 reaches 1.4 at p_x = 2, so F is cheaper
        # than C at some prices: kept.
        PriceExposure(design_id="F", label="F", family="f", platform="p", n_gpus=8, capex_usd=1.2, rest_usd=1.2,
                      terms=()),
    ]
    keep = candidate_mask(exps + extra, np.append(t, [20.0, 30.0, 30.0]),
                          {"x": PriceRange(low_usd=1.0, mode_usd=1.5, high_usd=2.0)})
    assert keep.tolist() == [True, True, True, False, False, True]


# ---------------------------------------------------------------------------------------------
# 5. Inputs, adapter, determinism
# ---------------------------------------------------------------------------------------------


class CatalogWithRanges:
    """The shape of a catalog that carries ranges: a price_ranges() method of id -> range records."""

    class Range:
        def __init__(self, low, mode, high, dist):
            self.low_usd, self.mode_usd, self.high_usd, self.distribution = low, mode, high, dist

    def price_ranges(self):
        return {"x": self.Range(1.0, 1.5, 2.0, "uniform")}


def test_band_ranges_by_hand():
    exps, _ = hand_designs()
    r = band_ranges(exps, 0.2, sections=["switches"])
    # Only x (a switch price, 1.5) gets a band: 1.2 .. 1.8; f (a NIC price) keeps its point price.
    assert r == {"x": PriceRange(low_usd=1.5 * 0.8, mode_usd=1.5, high_usd=1.5 * 1.2, distribution="uniform")}


def test_adapter_accepts_a_catalog_with_ranges_and_mappings():
    exps, t = hand_designs()
    a = robustness(exps, t, CatalogWithRanges(), samples=2000, seed=4)
    b = robustness(exps, t, {"x": {"low_usd": 1.0, "mode_usd": 1.5, "high_usd": 2.0, "distribution": "uniform"}},
                   samples=2000, seed=4)
    assert a == b
    assert as_price_ranges(CatalogWithRanges())["x"] == PriceRange(low_usd=1.0, mode_usd=1.5, high_usd=2.0,
                                                                   distribution="uniform")


def test_the_catalogs_own_ranges(pool):
    cat = pool[0][1]
    if not callable(getattr(cat, "price_ranges", None)):
        pytest.skip("this catalog carries no price ranges")
    ranges = as_price_ranges(cat)
    exps = [price_exposure(d, c, design_id=f"{d.family.value}/{d.platform}") for d, c, _ in pool]
    for e in exps:
        for term in e.terms:
            entry = next(x for sec in ("platforms", "switches", "media", "nics") for x in getattr(cat, sec)
                         if x.id == term.entry_id)
            if entry.price_low_usd is None:
                assert term.entry_id not in ranges
            else:  # the entry's own fields, mode at its point price
                r = ranges[term.entry_id]
                assert (r.low_usd, r.mode_usd, r.high_usd) == (entry.price_low_usd, entry.price_usd, entry.price_high_usd)
                assert r.distribution == getattr(entry.price_distribution, "value", entry.price_distribution)
    t = np.array([x[2] for x in pool])
    r = robustness(exps, t, cat, samples=2000, seed=2)
    assert set(r.price_ids) | set(r.fixed_price_ids) == {t_.entry_id for e in exps for t_ in e.terms}
    assert set(r.price_ids) == {t_.entry_id for e in exps for t_ in e.terms} & set(ranges)


def test_seeded_and_independent_of_design_order():
    exps, t, ranges = random_case(4)
    r1 = robustness(exps, t, ranges, samples=500, seed=9)
    assert r1 == robustness(exps, t, ranges, samples=500, seed=9)
    assert r1 != robustness(exps, t, ranges, samples=500, seed=10)
    # Columns are the sorted ids, so the draws do not depend on the designs' order: the designs
    # reversed (d03 kept before its duplicate, which input order decides) give the same figures.
    perm = list(range(len(exps)))[::-1]
    a, b = perm.index(3), perm.index(len(exps) - 1)
    perm[a], perm[b] = perm[b], perm[a]
    r2 = robustness([exps[j] for j in perm], t[perm], ranges, samples=500, seed=9)
    assert {d.design_id: d for d in r2.designs} == {d.design_id: d for d in r1.designs}


@pytest.mark.parametrize("call, match", [
    (lambda e, t: robustness(e, t[:2], {}, 10, 0), "time_to_train_s: 2 values for 3 designs"),
    (lambda e, t: robustness(e, np.array([1.0, -1.0, 2.0]), {}, 10, 0), r"time_to_train_s\[1\] = -1.0"),
    (lambda e, t: robustness(e, t, {}, 0, 0), "samples = 0"),
    (lambda e, t: robustness(e, t, {}, 10, -3), "seed = -3"),
    (lambda e, t: robustness(e, t, {"x": {"low_usd": 2, "mode_usd": 1, "high_usd": 3, "distribution": "uniform"}},
                             10, 0), "ranges.x: .*low_usd <= mode_usd <= high_usd"),
    (lambda e, t: robustness(e, t, {"x": PriceRange(low_usd=1, mode_usd=1.6, high_usd=2)}, 10, 0),
     "ranges.x: mode_usd = 1.6 but the designs were priced at 1.5"),
    (lambda e, t: robustness(e, t, {"x": {"low_usd": 1}}, 10, 0), "ranges.x = .* needs low_usd"),
    (lambda e, t: robustness(e, t, {}, 10, 0, goal=Goal(minimize="power_w")), "goal names power_w: pass power_w"),
    (lambda e, t: robustness(e + [e[0]], np.append(t, 1.0), {}, 10, 0), "design_id 'A' appears twice"),
    (lambda e, t: band_ranges(e, 1.5), "fraction = 1.5"),
    (lambda e, t: band_ranges(e, 0.2, sections=["switch"]), "sections: 'switch' is not a priced section"),
    (lambda e, t: robustness(e, t, {}, 10, 0, goal=Goal.model_construct(minimize="tco_usd", subject_to=())),
     "goal names tco_usd: the price analysis takes capex_usd, "),
])
def test_bad_input_is_one_line(call, match):
    exps, t = hand_designs()
    with pytest.raises(SpecError, match=match) as err:
        call(exps, t)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# 6. The frame and the figure
# ---------------------------------------------------------------------------------------------


def test_frame_and_plot(pool, tmp_path):
    designs_ = [d for d, _, _ in pool]
    exps = [price_exposure(d, cat, design_id=f"{d.family.value}/{d.platform}") for d, cat, _ in pool]
    t = np.array([x[2] for x in pool])
    g = Goal.model_validate({"minimize": "time_to_train_s", "subject_to": {"capex_usd": f"<= {8e7}"}})
    r = robustness(exps, t, band_ranges(exps, 0.2), samples=4000, seed=1, goal=g)
    f = robustness_frame(r, designs_)
    assert tuple(f.columns) == COLUMNS
    assert f["design_id"].tolist() == [e.design_id for e in exps]
    assert f["capex_usd"].tolist() == pytest.approx([d.capex_usd for d in designs_], rel=1e-9)
    assert f["n_gpus"].tolist() == [2048] * len(pool) and f["time_to_train_days"].tolist() == [x[2] / 86_400 for x in pool]
    # Standard error of a proportion: sqrt(p (1 - p) / n).
    p = f["p_on_front"].to_numpy()
    assert f["p_on_front_se"].to_numpy() == pytest.approx(np.sqrt(p * (1 - p) / 4000))
    assert f["p_optimum"].sum() + r.p_goal_unmet == pytest.approx(1.0)
    with pytest.raises(SpecError, match="designs: 1 given for 7"):
        robustness_frame(r, designs_[:1])
    fig = robustness_figure(f)
    ax = fig.axes[0]
    bars = {c.get_label(): [b.get_width() for b in c] for c in ax.containers if isinstance(c, BarContainer)}
    assert bars["on the front"] == pytest.approx(p.tolist())
    assert bars["goal's answer"] == pytest.approx(f["p_optimum"].tolist())
    ticks = [x.get_text() for x in ax.get_yticklabels()]
    assert sorted(ticks) == sorted(f"{d} *" if on else d for d, on in zip(f["design_id"], f["on_point_front"]))
    out = plot_robustness(f, tmp_path / "robustness.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(tmp_path.glob(".*partial*"))


@pytest.mark.parametrize("goal, kept", [
    ({"minimize": "time_to_train_s", "subject_to": {"power_w": "<= 2.5e7"}}, [True, True]),
    ({"minimize": "power_w"}, [True, True]),
    ({"minimize": "capex_usd", "subject_to": {"time_to_train_s": "<= 20"}}, [True, False]),
    ("front", [True, False]),
])
def test_a_goal_on_power_keeps_the_designs_beaten_on_capex_and_time(goal, kept):
    # i is cheaper and faster than j at every price of the box but draws 30 MW to j's 20 MW: under a
    # 25 MW limit j is the answer in every draw. A goal on capex and time may leave j out (dominated in
    # every draw); a goal on power must keep it, or the study would read "unmet".
    def exposure(did, q):
        return PriceExposure(design_id=did, label=did, family="rail-optimized", platform="p", n_gpus=1024,
                             capex_usd=q * 100.0, terms=(PriceTerm(entry_id="plat", section="platforms", quantity=q,
                                                                   price_usd=100.0),))
    exps, t, power = [exposure("i", 10), exposure("j", 11)], [10.0, 11.0], [30e6, 20e6]
    ranges = {"plat": PriceRange(low_usd=90.0, mode_usd=100.0, high_usd=110.0, distribution="triangular")}
    g = Goal.model_validate(goal)
    keep = goal_candidate_mask(g, exps, t, ranges)
    assert keep.tolist() == kept
    if kept == [True, True] and g.subject_to:
        idx = [k for k in range(2) if keep[k]]
        r = robustness([exps[k] for k in idx], [t[k] for k in idx], ranges, 200, 0, goal=g, power_w=[power[k] for k in idx])
        assert r.p_goal_unmet == 0.0 and {d.design_id: d.p_optimum for d in r.designs} == {"i": 0.0, "j": 1.0}
