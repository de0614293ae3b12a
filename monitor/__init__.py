"""sglang-slo-monitor: an observing sidecar computing SLO state for SGLang deployments.

The root package carries nothing: every part imports the module it needs (the version: `monitor.version`).
"""
