"""The sidecar's version (pyproject.toml's `version`): reported in /api/v1/status and as OTLP's service.version."""

__version__ = "0.1.0"
