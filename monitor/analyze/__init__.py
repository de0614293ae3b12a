"""Post-incident analysis: a verdict naming the mechanism (demand vs capacity), breach timeline, percentiles
against a checked baseline and the recipe, ranked co-moving series.

Sources (`recording`, `prometheus`) produce one aligned time-series model (`model.Dataset`); the
analysis (`baseline`, `signals`, `diagnose`, `sli`, `timeline`, `percentiles`, `correlate`, `report`) is
pure; rendering (`fmt`, `plots`, `markdown`, `html`) only formats a finished `report.Report`.
"""
