"""Unit conversions, applied once when data is loaded. Inside designer everything is SI:
bytes, seconds, bytes per second, FLOP per second, watts, US dollars."""

GBPS_TO_BYTES_PER_S = 1e9 / 8.0  # 1 Gb/s = 1e9 bits/s
GB_TO_BYTES = 1e9  # decimal GB, as vendors quote HBM and link rates
GIB_TO_BYTES = 2.0**30
TB_PER_S_TO_BYTES_PER_S = 1e12
GB_PER_S_TO_BYTES_PER_S = 1e9
TFLOPS_TO_FLOPS = 1e12
US_TO_S = 1e-6
SECONDS_PER_DAY = 86400.0


def gbps_to_bytes_per_s(gbps: float) -> float:
    return gbps * GBPS_TO_BYTES_PER_S


def bytes_per_s_to_gbps(bytes_per_s: float) -> float:
    return bytes_per_s / GBPS_TO_BYTES_PER_S
