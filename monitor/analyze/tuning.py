"""How far a signal must move before the post-incident verdict counts it (analysis tuning, used by analyze/ only).

Every threshold here is scaled by the deployment's own data (#32 item 2): a ratio is against the signal's own
baseline level (the median of the smoothed baseline), an absolute step is added to it, and both count only
past the baseline's own noise band (3 baseline spreads, monitor/analyze/correlate.CHANGE_Z) for three steps
running. What is not a threshold on one signal is derived where it is used: the batch's own slowdown from the
baseline's (running, ITL) points (diagnose.batch_slowdown), the warming a power rise explains from the chip's
own baseline temperature and power (diagnose._warming_per_power), the retraction rate a baseline allows by the
rule of three on its own span (diagnose.event_shift).
"""

from __future__ import annotations

from typing import Final

# Ratios of the signal's own baseline level, in the direction that hurts.
ANALYSIS_RATE_CHANGE: Final = 1.25  # prompt/output length, per-request decode speed, ITL
# Arrivals, measured or inferred (finished + change in the system), are Poisson: a 30 s mean of 1.5 req/s swings
# 15 %, and a 1.25x threshold named overload in a third of the lab's light-load prefill slowdowns.
ANALYSIS_ARRIVALS_CHANGE: Final = 1.5
ANALYSIS_PREFILL_CHANGE: Final = 1.5  # prefill time per request, PD stages, KV transfer time
ANALYSIS_ACCEPT_CHANGE: Final = 1.2  # speculative accept length
# KV cache no running request holds, a share of the pool (signals.unheld: usage less the running requests times what
# each held through the baseline): SGLang preallocates the pool, so KV it lost shows here, not on the chip's HBM.
# 15 % of the pool, past the baseline's own noise band and past what the requests in prefill hold (diagnose._unheld).
# Before, KV per running request 2.5x: the emulator's full HBM took slots, not tokens, and a prefill stall moves
# that ratio 1.5x.
ANALYSIS_KV_UNHELD_SHARE: Final = 0.15
ANALYSIS_CONSEQUENCE_CHANGE: Final = 1.5  # running, queue, KV usage, throughput: named as consequences from here
ANALYSIS_POWER_RISE: Final = 1.1  # accelerator power: a rise this large before the warming makes it load
# Absolute steps above the signal's own baseline level.
ANALYSIS_CACHE_HIT_DROP: Final = 0.1  # prefix-cache hit rate (a share: a ratio of a small share is noise)
# A chip's temperature rise counts from here, unless the power the chip drew explains it (diagnose: a die's rise
# above its inlet is proportional to its power, from its own baseline); a rise of 5 past the chip's own slowdown
# temperature counts whatever it is (NVML's SLOWDOWN threshold, DCGM_FI_DEV_SLOWDOWN_TEMP; where the telemetry reports
# none, as npu-smi and npu-exporter never do, the alert's 85 degC stands in), and chips throttling for heat (NVML /
# DCGM clock event reasons) are overheating's own event.
ANALYSIS_TEMPERATURE_RISE_CELSIUS: Final = 6.0
# Accelerator HBM free on the fullest chip, a ratio of the chip's own headroom at the baseline: SGLang preallocates
# the KV pool (mem_fraction_static), so HBM use is flat with load; memory something else took counts once it has
# taken half of what was free (a 4-point drift at 60 % used is noise, at 95 % it nearly fills the chip). Before, a
# fixed 3-point rise: the emulator's scale, whose HBM moved 2 points from idle to full load.
ANALYSIS_HBM_FREE_CHANGE: Final = 2.0
# A signal that leaves its noise band the way that hurts by this share of its threshold (a ratio's log, an
# absolute step's size) without reaching it is a trace: "no incident" is then said with low confidence.
ANALYSIS_TRACE_SHARE: Final = 0.5
# How the levels are read, in seconds and points of the deployment's own step.
ANALYSIS_SMOOTH_SECONDS: Final = 30.0  # centred moving mean before levels are compared
ANALYSIS_MIN_BASELINE_POINTS: Final = 6
ANALYSIS_MIN_BASELINE_SECONDS: Final = 60.0
