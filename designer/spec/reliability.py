"""A study's `reliability` section: what failures cost a training run (designer.analysis.goodput).

With it, every design gets its job's interruption rate (from the component failure rates and the
design's counts of GPUs, hosts, NICs, links and switches), Daly's optimal checkpoint interval, and
the goodput fraction; `time_to_train_with_failures_s` = time_to_train_s / goodput_fraction is reported
beside the failure-free figure and may be an objective or a goal limit.

The recovery follows the design: a design with spare HB domains (the network section's `spares`)
restarts at once on healthy hardware (`spare`); one without them restarts `without_spares`:
`degraded` (at once, short of the failed units until they are repaired) or `wait-repair`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from designer.spec.base import Record
from designer.spec.network_study import FailureRates

# Detection and restart: Llama 3 405B's interruptions were mostly detected by NCCL watchdog timeouts
# and restarted automatically (Dubey et al. 2024 §3.3.4, "The Llama 3 Herd of Models"); the paper gives
# no per-restart time. 2 minutes to detect (a collective timeout of the order of NCCL's watchdog) and
# 8 minutes to reschedule, start the processes and build the communicators are assumptions [E].
DEFAULT_DETECT_S = 120.0
DEFAULT_RESTART_S = 480.0


class ReliabilitySettings(Record):
    """Failure rates, checkpoint bandwidth and restart times of the study's runs."""

    rates: FailureRates | None = Field(default=None, description="None: the network section's spares rates, "
                                                                 "else the shipped defaults (Llama 3 Table 5)")
    # The job's aggregate checkpoint write bandwidth. None: the `costs.storage` line's write bandwidth
    # (its write_gb_per_s or write_gb_per_s_per_pb x capacity); one of the two is needed.
    checkpoint_write_gb_per_s: float | None = Field(default=None, gt=0)
    checkpoint_read_gb_per_s: float | None = Field(default=None, gt=0, description="None: the write bandwidth")
    detect_s: float = Field(default=DEFAULT_DETECT_S, ge=0)
    restart_s: float = Field(default=DEFAULT_RESTART_S, ge=0)
    reload_s: float | None = Field(default=None, ge=0, description="None: the checkpoint's read time")
    without_spares: Literal["degraded", "wait-repair"] = "degraded"
    # Bytes per parameter a checkpoint holds: bf16 weights + fp32 master + Adam m, v = 14 (BLOOM's
    # 2.3 TB for 176B parameters, designer.analysis.goodput).
    checkpoint_bytes_per_param: float = Field(default=14.0, gt=0)
    # GPUs a GPU-side failure takes out where the fabric is any-to-any (a TP group of one 8-GPU host);
    # None: the network section's spares.unit_gpus, else 8. Rail-only always loses the HB domain.
    unit_gpus: int | None = Field(default=None, ge=1)
    # Spares as a design knob of the co-design search: [false, true] tries every cluster design without
    # spare HB domains and with the network section's `spares` (its defaults when it has none), so the
    # front trades their capex against the goodput they buy. None: as the network section says.
    try_spares: tuple[bool, ...] | None = Field(default=None, min_length=1)


__all__ = ["DEFAULT_DETECT_S", "DEFAULT_RESTART_S", "ReliabilitySettings"]
