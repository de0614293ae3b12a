"""Post-incident analysis: breach timeline, percentiles against baselines, ranked co-moving series.

Sources (`recording`, `prometheus`) produce one aligned time-series model (`model.Dataset`); the
analysis (`sli`, `timeline`, `percentiles`, `correlate`, `report`) is pure; rendering (`plots`,
`markdown`, `html`) only formats a finished `report.Report`.
"""
