"""Injected ground truth for `slo-monitor analyze`: every incident kind the emulator can inject, run on an
advanced clock beside the sidecar (its recording) and a capture that a real Prometheus is backfilled from,
then analysed from both; `python -m tools.incident_lab` writes the measured confusion table into
docs/analysis.md (`make confusion`); `--grid` (tools/incident_lab/grid.py, `make confusion-grid`) runs it as an
experiment over seeds, magnitudes, arrival rates and pairs and writes its summary at the top of that document."""
