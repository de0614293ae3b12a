"""The sidecar's own crash-safe history (SQLite): windows survive restarts, analysis works offline."""
