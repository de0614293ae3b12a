"""CLI commands of the sidecar itself."""
