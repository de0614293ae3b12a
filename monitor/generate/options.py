"""Generation options and the time-scale arithmetic.

`time_scale` N divides every rule window, every `for`, the Prometheus scrape/evaluation
intervals and Alertmanager's group timers by N, so an end-to-end test can watch a 1h/5m page
fire within a minute or two. Record *names* keep their nominal window (`..:rate5m` is computed
over `[5s]` at N=60) so tests and dashboards need not know N. Burn-rate factors are not
scaled: they are ratios. Windows must stay >= 4 scrape intervals to hold enough samples.

`histograms` says how Prometheus stores SGLang's (and its gateway's) latency histograms: `classic` (the
`_bucket`/`_sum`/`_count` series) or `nhcb` (Prometheus 3 converting them at scrape time into native
histograms with custom buckets, `convert_classic_histograms_to_nhcb`): rules, dashboards, scrape config and
promtool tests all follow it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from monitor.conventions.policy import window_seconds

DEFAULT_PAGE_WEBHOOK = "http://127.0.0.1:9095/page"
DEFAULT_TICKET_WEBHOOK = "http://127.0.0.1:9095/ticket"
ENV_PAGE_WEBHOOK = "SLO_MONITOR_PAGE_WEBHOOK_URL"
ENV_TICKET_WEBHOOK = "SLO_MONITOR_TICKET_WEBHOOK_URL"
BASE_SCRAPE_SECONDS = 15.0
HISTOGRAM_MODES = ("classic", "nhcb")


@dataclass(frozen=True)
class Options:
    time_scale: float = 1.0
    approximate: bool = False
    page_webhook_url: str = DEFAULT_PAGE_WEBHOOK
    ticket_webhook_url: str = DEFAULT_TICKET_WEBHOOK
    alertmanager: str = "127.0.0.1:9093"
    namespace: str = "monitoring"
    config_name: str = "<config>"
    histograms: str = "classic"

    def __post_init__(self) -> None:
        if not self.time_scale >= 1:
            raise ValueError(f"--time-scale must be >= 1, got {self.time_scale}")
        if self.histograms not in HISTOGRAM_MODES:
            raise ValueError(f"--histograms must be one of {', '.join(HISTOGRAM_MODES)}, got {self.histograms!r}")

    @property
    def nhcb(self) -> bool:
        """Latency histograms are native histograms with custom buckets (no `_bucket/_sum/_count` series)."""
        return self.histograms == "nhcb"

    def duration(self, window: str | float) -> str:
        """A window (`5m`, or seconds) divided by the time scale, as a Prometheus duration."""
        seconds = window_seconds(window) if isinstance(window, str) else float(window)
        return format_ms(seconds * 1000 / self.time_scale)

    @property
    def scrape_interval(self) -> str:
        return format_ms(max(1000.0, BASE_SCRAPE_SECONDS * 1000 / self.time_scale))

    @property
    def scaled(self) -> bool:
        return self.time_scale != 1


def webhook_defaults() -> tuple[str, str]:
    """Webhook URLs from the environment, else the documented local placeholders."""
    return (os.environ.get(ENV_PAGE_WEBHOOK) or DEFAULT_PAGE_WEBHOOK,
            os.environ.get(ENV_TICKET_WEBHOOK) or DEFAULT_TICKET_WEBHOOK)


def format_ms(ms: float) -> str:
    """Milliseconds to the shortest exact Prometheus duration (`1h`, `5s`, `2500ms`)."""
    total = max(1, int(round(ms)))
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if total >= size and total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}ms"
