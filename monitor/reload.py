"""What a config reload (SIGHUP, POST /-/reload) changes: pure comparison of the running config and the new one.

Deployments whose definition is unchanged keep their SLO windows; the others are rebuilt from empty, new
ones added, missing ones dropped. A few sidecar settings are bound when the process starts (its listening
socket, the recording file, the OTLP exporter, the HTTP server's deadlines and connection cap, the open-files
limit): a reload that changes one of them is refused whole, with the reason, and the running config stays, as
Prometheus refuses a bad file.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.config import Config

# Sidecar settings read only at start: changing them takes a restart.
RESTART_ONLY = ("listen_host", "listen_port", "recording_path", "http_header_timeout_seconds", "otlp_endpoint",
                "otlp_interval_seconds", "max_connections", "open_files_limit", "enable_lifecycle")


class ReloadRefused(ValueError):
    """The new config is valid but cannot be applied to the running sidecar."""


@dataclass(frozen=True)
class ReloadPlan:
    kept: list[str]  # unchanged: windows kept
    rebuilt: list[str]  # definition changed: windows start empty
    added: list[str]
    removed: list[str]

    def summary(self) -> str:
        parts = [f"{what} {', '.join(names)}" for what, names in
                 (("kept", self.kept), ("rebuilt", self.rebuilt), ("added", self.added), ("removed", self.removed))
                 if names]
        return "; ".join(parts) or "no deployments"


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """Which deployments keep their windows; raises ReloadRefused for a change that needs a restart."""
    changed = [f"sidecar.{name} ({getattr(old.sidecar, name)!r} -> {getattr(new.sidecar, name)!r})"
               for name in RESTART_ONLY if getattr(old.sidecar, name) != getattr(new.sidecar, name)]
    if changed:
        raise ReloadRefused(f"{', '.join(changed)} cannot change while the sidecar runs; restart it to apply "
                            f"{'this' if len(changed) == 1 else 'these'}")
    before = {d.name: d for d in old.deployments}
    after = {d.name for d in new.deployments}
    kept = [d.name for d in new.deployments if before.get(d.name) == d]
    rebuilt = [d.name for d in new.deployments if d.name in before and before[d.name] != d]
    added = [d.name for d in new.deployments if d.name not in before]
    removed = [name for name in before if name not in after]
    return ReloadPlan(kept, rebuilt, added, removed)


def request_log_part(config: Config) -> list[object]:
    """What the request-log reader is built from: the deployments that have a request-log target."""
    return [d for d in config.deployments if any(t.source == "request-log" for t in d.targets)]
