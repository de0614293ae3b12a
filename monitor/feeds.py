"""Which targets and label matchers supply a number of a deployment: the one place the roles of
`conventions.slis` (an SLI's `roles`, `COUNTER_ROLES`, `ENGINE_ROLES`) are applied to targets.

The sidecar's engine and its per-worker handling of a router's `/engine_metrics`, the rule generator, the
dashboards and the analyzer all call `feed`. A server scraped directly is read from its own target; a
router's merged `/engine_metrics` stands in for the workers not scraped directly, each worker with the role
its `engine_type` label names. In PromQL that is one selector: the target roles that carry the series, the
engine types whose role does not count left out, and the directly scraped workers left out of the merge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from monitor.config import Deployment, Target
from monitor.conventions.names import COUNTERS, GAUGES, WORKER_ADDR_LABEL, Matcher
from monitor.conventions.slis import (
    COUNTER_ROLES,
    ENGINE_ROLES,
    ENGINE_TYPE_LABEL,
    ENGINE_TYPE_ROLES,
    SLI_BY_KEY,
    SLI_RECORDS,
)
from monitor.parse.gateway import worker_address

ROLE_LABEL = "role"  # the label the generated scrape config puts on every target's series


@dataclass(frozen=True)
class Feed:
    """The targets of one deployment whose series feed a number recorded on `roles`, and the label
    matchers (beyond `deployment`) that select the same series in Prometheus."""

    roles: tuple[str, ...]
    direct: tuple[Target, ...]  # SGLang servers of those roles scraped directly
    merged: tuple[Target, ...]  # routers' /engine_metrics standing in for the workers not scraped directly
    direct_workers: frozenset[str]  # worker addresses of every directly scraped server (any role)

    @property
    def targets(self) -> tuple[Target, ...]:
        return (*self.direct, *self.merged)

    def counts(self, role: str | None) -> bool:
        """Whether a series observed on a server of `role` (a target's, or a merged worker's) counts."""
        return role in self.roles

    def reads_worker(self, address: str) -> bool:
        """Whether a worker inside a router's merge is read from the merge (not scraped directly)."""
        return not (address and address in self.direct_workers)

    @property
    def target_roles(self) -> list[str]:
        """The `role` label values of the targets that carry the series (the roles themselves when the
        deployment has none: the analyzer, or a config that scrapes none of them)."""
        return sorted({t.role for t in self.targets} or set(self.roles))

    @property
    def matchers(self) -> tuple[Matcher, ...]:
        out: list[Matcher] = [(ROLE_LABEL, "=~", "|".join(self.target_roles))]
        left_out = sorted(t for t, role in ENGINE_TYPE_ROLES.items() if role not in self.roles)
        if left_out:  # SGLang labels every series with its engine type, directly scraped or merged
            out.append((ENGINE_TYPE_LABEL, "!=", left_out[0]) if len(left_out) == 1
                       else (ENGINE_TYPE_LABEL, "!~", "|".join(left_out)))
        if self.merged and self.direct_workers:  # series scraped directly have no worker_addr: kept
            out.append((WORKER_ADDR_LABEL, "!~", "|".join(re.escape(w) for w in sorted(self.direct_workers))))
        return tuple(out)


def feed(dep: Deployment | None, roles: tuple[str, ...]) -> Feed:
    """The feed of a number SGLang records on `roles`. With no deployment (the analyzer reading a
    Prometheus it did not configure), the matchers say only roles and engine types."""
    if dep is None:
        return Feed(tuple(roles), (), (), frozenset())
    wanted = set(roles)
    direct = tuple(t for t in dep.targets if t.source == "sglang" and t.role in wanted)
    merged = tuple(t for t in dep.targets
                   if t.source == "router-engine-metrics" and (t.role in wanted or t.role == "router"))
    workers = frozenset(worker_address(t.url) for t in dep.targets if t.source == "sglang" and t.url)
    return Feed(tuple(roles), direct, merged, workers)


def sli_feed(dep: Deployment | None, sli: str) -> Feed:
    """The feed of a latency SLI (its record's roles)."""
    return feed(dep, SLI_BY_KEY[sli].roles)


# --- What a target is read for ------------------------------------------------------------------------


def sli_reading(dep: Deployment, sli: str) -> str:
    """How much of an SLI's histogram a deployment's scrapes read: "full" where it has a target (windows, budget,
    percentiles), else what the readers without a target need (the record's `untargeted`)."""
    return "full" if dep.target_seconds(sli) is not None else SLI_BY_KEY[sli].untargeted


def _roles_read(target: Target) -> tuple[str, ...]:
    """The server roles whose series a target carries: its own, or for a router's merged /engine_metrics any
    worker's (each worker's role comes from its `engine_type` label, known only once scraped)."""
    return ENGINE_ROLES if target.source == "router-engine-metrics" else (target.role,)


def target_wanted(dep: Deployment, target: Target) -> frozenset[str]:
    """The sample names a scrape of an SGLang server (or a router's /engine_metrics) reads: each SLI's histogram
    in the roles that feed it (buckets only where `sli_reading` is "full"), the counters in their roles, and
    the load gauges (every role). Nothing else is parsed, so an SLI record or a signal that no reader of this
    deployment needs costs its scrapes nothing (issue #33: reading every family everywhere cost 3.7x)."""
    roles = _roles_read(target)
    names: set[str] = set(GAUGES.values())
    for rec in SLI_RECORDS:
        if not any(r in rec.roles for r in roles):
            continue
        names |= {rec.family + "_sum", rec.family + "_count"}
        if sli_reading(dep, rec.key) == "full":
            names.add(rec.family + "_bucket")
    names |= {family for cname, family in COUNTERS.items() if any(r in COUNTER_ROLES[cname] for r in roles)}
    return frozenset(names)
