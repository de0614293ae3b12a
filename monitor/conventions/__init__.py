"""Conventions, split by kind: `names` (every family, series, rule and alert name), `slis` (one record per
SLI and the roles that feed it), `policy` (windows, burn-rate alerts, thresholds, bounds), `units`
(durations, `le`). Analysis tuning lives in `monitor.analyze.tuning`."""
