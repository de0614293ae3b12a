"""How far a signal must move before the post-incident verdict counts it (analysis tuning, used by analyze/ only)."""

from __future__ import annotations

from typing import Final

# Post-incident analysis (monitor/analyze/diagnose.py): how far a demand or capacity signal must move from its
# baseline, in the direction that hurts, before the verdict counts it (ratio of levels; an absolute step for
# temperatures and ratios), and how much history a baseline needs before anything is compared with it.
ANALYSIS_RATE_CHANGE: Final = 1.25  # prompt/output length, per-request decode speed, ITL
# Arrivals, measured or inferred (finished + change in the system), are Poisson: a 30 s mean of 1.5 req/s swings
# 15 %, and a 1.25x threshold named overload in a third of the lab's light-load prefill slowdowns.
ANALYSIS_ARRIVALS_CHANGE: Final = 1.5
ANALYSIS_PREFILL_CHANGE: Final = 1.5  # prefill time per request, PD stages, KV transfer time
ANALYSIS_ACCEPT_CHANGE: Final = 1.2  # speculative accept length
ANALYSIS_KV_SHARE_CHANGE: Final = 2.5  # KV cache per running request (the cache shrank: more than prefill stalls)
ANALYSIS_CACHE_HIT_DROP: Final = 0.1  # prefix-cache hit rate, absolute
ANALYSIS_CONSEQUENCE_CHANGE: Final = 1.5  # running, queue, KV usage, throughput: named as consequences from here
# A chip's temperature rise counts from here, unless power rose first (a chip working harder: load, not heat).
ANALYSIS_TEMPERATURE_RISE_CELSIUS: Final = 6.0
ANALYSIS_POWER_RISE: Final = 1.1  # accelerator power: a rise this large before the warming makes it load
# Accelerator HBM used (fullest chip), absolute share: the KV pool is preallocated, so HBM use is flat with load
# (the emulator's moves 2 % from idle to full); more is memory something else took.
ANALYSIS_HBM_RISE: Final = 0.03
# A signal that leaves its noise band the way that hurts by this share of its threshold (a ratio's log, an
# absolute step's size) without reaching it is a trace: "no incident" is then said with low confidence.
ANALYSIS_TRACE_SHARE: Final = 0.5
ANALYSIS_SMOOTH_SECONDS: Final = 30.0  # centred moving mean before levels are compared
ANALYSIS_MIN_BASELINE_POINTS: Final = 6
ANALYSIS_MIN_BASELINE_SECONDS: Final = 60.0
