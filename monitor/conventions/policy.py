"""SLO policy: the windows, the multi-window multi-burn-rate alerts, symptom thresholds, config bounds."""

from __future__ import annotations

from typing import Final

from monitor.conventions.units import parse_duration

# --- SLO windows and the SRE-workbook multi-window multi-burn-rate policy -------------------
# Windows the sidecar computes itself; longer ones are Prometheus's job (generated rules).
SIDECAR_WINDOWS: Final[dict[str, int]] = {"5m": 300, "30m": 1800, "1h": 3600, "6h": 21600}
# A series absent longer than the longest sidecar window contributes nothing to any window: its
# accumulator is retired (its value kept in its family's total), so label churn cannot grow memory.
SERIES_EXPIRY_SECONDS: Final = max(SIDECAR_WINDOWS.values())
# A target that changes between up and down more than once in this long is said once at its first change
# and then in one summary line per interval (monitor/scrape/flapping.py), not one line per change.
FLAP_SUMMARY_SECONDS: Final = 60.0
# The recording (monitor/record/store.py) keeps every tick for `recording_full_resolution`, then one per
# the windows' coarse step (60 s, as the sidecar holds them in memory: slo/windows.py) up to the longest
# window and a margin, then one per the error budget's step (300 s): a restart restores the same windows.
RECORDING_COARSE_STEP_SECONDS: Final = 60.0
RECORDING_LONG_AFTER_SECONDS: Final = SERIES_EXPIRY_SECONDS + 120.0
RECORDING_LONG_STEP_SECONDS: Final = 300.0
RECORDING_MIN_FULL_RESOLUTION_SECONDS: Final = 420.0  # the windows' fine horizon: every snapshot is kept that long
RULE_WINDOWS: Final[dict[str, int]] = {
    "5m": 300, "30m": 1800, "1h": 3600, "2h": 7200, "6h": 21600, "1d": 86400, "3d": 259200,
}
# (severity, long window, short window, burn-rate factor): Google SRE workbook, ch. 5, table 5-8.
BURN_RATE_ALERTS: Final = (
    ("page", "1h", "5m", 14.4),
    ("page", "6h", "30m", 6.0),
    ("ticket", "1d", "2h", 3.0),
    ("ticket", "3d", "6h", 1.0),
)
QUANTILES: Final = (0.5, 0.9, 0.99)
# The SLO period a deployment may have (its error budget is computed over it in the generated rules).
PERIOD_MIN_SECONDS: Final = 3600
PERIOD_MAX_SECONDS: Final = 365 * 86400
# What one config may ask for. A deployment's name becomes file names (alerts/rules/<name>.rules.yml,
# ...; 255 bytes at most on Linux) and a label on every series. The biggest recipe has a few dozen
# targets and the sidecar is measured at 400 (bench/RESULTS.md): beyond these, shard (docs/scale-out.md).
MAX_NAME_CHARS: Final = 128
MAX_TARGETS_PER_DEPLOYMENT: Final = 1_000
MAX_DEPLOYMENTS: Final = 1_000
MAX_TARGETS: Final = 10_000
MAX_CONFIG_BYTES: Final = 8 * 1024 * 1024  # a config of 10,000 targets is ~1 MB


def burn_thresholds_text() -> str:
    """`page 14.4 (1h & 5m) and 6 (6h & 30m), ticket 3 (1d & 2h) and 1 (3d & 6h)` for panel descriptions."""
    parts: dict[str, list[str]] = {}
    for severity, long_w, short_w, factor in BURN_RATE_ALERTS:
        parts.setdefault(severity, []).append(f"{factor:g} ({long_w} & {short_w})")
    return ", ".join(f"{sev} {' and '.join(p)}" for sev, p in parts.items())


PAGE_BURN_RATE: Final = max(f for sev, _, _, f in BURN_RATE_ALERTS if sev == "page")  # the fast page pair
PAGE_BURN_RATE_SLOW: Final = min(f for sev, _, _, f in BURN_RATE_ALERTS if sev == "page")  # the slow one
# Thresholds of the symptom alerts (the burn-rate ones are BURN_RATE_ALERTS above).
KV_FULL_RATIO: Final = 0.95  # sglang:token_usage: new requests queue, running ones get retracted
REGRESSION_FACTOR: Final = 1.5  # mean latency over the recipe's baseline
# HBM above 95 %: the headroom SGLang leaves beyond --mem-fraction-static is gone (activation or graph
# capture OOM next). 85 °C is NVIDIA's template default; Huawei publishes no number: a site knob.
ACCEL_MEMORY_RATIO: Final = 0.95
ACCEL_TEMPERATURE_CELSIUS: Final = 85.0


def window_seconds(window: str) -> int:
    return RULE_WINDOWS.get(window) or parse_duration(window)
