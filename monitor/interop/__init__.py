"""Other tools' SLO specs, in and out: OpenSLO v1 documents (read as deployments, written from them) and
Sloth `prometheus/v1` specs (written). An adapter at the edge: it imports the config and the SLO plans
(`monitor.slo_plan`, which the generator's rules use too), never the generator; nothing below it imports it."""
