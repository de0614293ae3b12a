"""sglang-slo-monitor: an observing sidecar computing SLO state for SGLang deployments."""

__version__ = "0.1.0"
