"""Group shapes of the rank orders, checked against the ranks themselves.

Each expected shape is derived by listing the global ranks of a group from Megatron's rank formula
(rank = sum of index_d x stride_d over the order's dimensions, innermost first) and counting them per
HB domain, independently of designer's closed-form shapes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from designer.perf.placement import ORDERS, place
from tests.perf.systems import cluster

HB = 8


def ranks_of_gradient_group(tp, cp, dp, pp, order):
    """The DP x CP ranks sharing tp index 0 and pp index 0, listed from the rank formula."""
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    stride, acc = {}, 1
    for name in order:
        stride[name] = acc
        acc *= sizes[name]
    return sorted(c * stride["cp"] + d * stride["dp"] for c, d in itertools.product(range(cp), range(dp)))


def shape_of(ranks):
    domains = {}
    for r in ranks:
        domains.setdefault(r // HB, []).append(r % HB)
    locals_ = [tuple(sorted(v)) for v in domains.values()]
    return dict(size=len(ranks), ranks_per_domain=max(len(v) for v in locals_), domain_span=len(domains),
                same_rail=len(set(locals_)) == 1, extent_domains=max(domains) - min(domains) + 1)


CASES = [(1, 1, 128, 8), (2, 2, 4, 2), (4, 2, 8, 4), (1, 4, 16, 2), (2, 1, 32, 4), (8, 2, 4, 2), (1, 2, 8, 8)]


@pytest.mark.parametrize("order_code", [0, 1])
@pytest.mark.parametrize("tp,cp,dp,pp", CASES)
def test_gradient_group_shape_matches_its_ranks(tp, cp, dp, pp, order_code):
    system = cluster("h100_sxm", tp * cp * dp * pp, hb_size=HB)
    got = place(np.array([tp]), np.array([cp]), np.array([dp]), np.array([pp]), np.array([1]), system,
                order_code=np.array([order_code])).grad
    want = shape_of(ranks_of_gradient_group(tp, cp, dp, pp, ORDERS[order_code]))
    assert {k: int(getattr(got, k)[0]) if k != "same_rail" else bool(got.same_rail[0]) for k in want} == want


def test_pipeline_outside_data_parallel_sends_the_gradients_over_the_nics():
    """tp-cp-pp-dp with 8 stages per node: each data-parallel group has one GPU per node, so the
    gradient reduction cannot use NVLink at all (it did, under CP's stride, before)."""
    system = cluster("h100_sxm", 1024, hb_size=HB)
    g = place(np.array([1]), np.array([1]), np.array([128]), np.array([8]), np.array([1]), system,
              order_code=np.array([1])).grad
    assert (int(g.ranks_per_domain[0]), int(g.domain_span[0])) == (1, 128)
