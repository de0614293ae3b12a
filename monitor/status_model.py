"""The sidecar's read model: what it knows about each deployment now, as the pydantic wire types of
`/api/v1/status`, built from SLO engine state, target statuses and the request log's goodput windows. Every
view reads this one model: the HTTP API and `/metrics` (export), the status table, the recording, the
request-log families and the analyzer."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel

from monitor.config import Deployment
from monitor.redaction import redact
from monitor.requestlog.goodput import WindowGoodput
from monitor.scrape.status import TargetStatus
from monitor.scrape.supervise import LoopHealth
from monitor.slo.leading import HOLD_SECONDS
from monitor.slo.state import AvailabilityState, ClientGoneWindow, DeploymentState, SliState
from monitor.version import __version__


def _f(x: float | None) -> float | None:
    """JSON has no NaN/Inf: they become null."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return x


class WindowStatus(BaseModel):
    window: str
    seconds: float
    covered_seconds: float
    events: float | None  # None (like every number here) when the engine's value is NaN: never a 0
    good_ratio: float | None
    good_ratio_lower: float | None
    good_ratio_upper: float | None
    burn_rate: float | None
    p50_seconds: float | None
    p90_seconds: float | None
    p99_seconds: float | None
    mean_seconds: float | None


class SliStatus(BaseModel):
    sli: str
    target_seconds: float
    objective: float
    target_is_bucket_edge: bool
    fix_flag: str | None
    error_budget_remaining: float | None
    budget_covered_seconds: float
    breaching: bool  # the shortest window's SLI is under the objective
    windows: list[WindowStatus]


class TargetStatusModel(BaseModel):
    id: str
    role: str
    source: str
    url: str | None
    up: bool
    placeholder: bool
    last_error: str | None
    last_scrape_ts: float | None
    last_success_ts: float | None
    scrape_duration_seconds: float
    samples: int
    bytes: int
    scrapes: int
    errors: int
    counter_resets: int
    format: str | None
    detail: dict[str, float]
    warnings: list[str] = []  # what the last scrape got wrong but could use (e.g. no _sum: no mean)
    series_retired_early: int = 0  # series retired before their 6 h expiry for label churn


class GoodputWindowStatus(BaseModel):
    """Per-request goodput over one window, from the deployment's request-log targets."""

    window: str
    seconds: float
    requests: int
    good: int
    ratio: float | None  # None for an empty window
    missed: dict[str, int]  # ttft | tpot | e2e | failed -> requests (a request can miss several)
    objective: float | None  # the goodput SLO, when the deployment has one


class TpotLeadingStatus(BaseModel):
    """How fast the requests running now decode, seconds per output token (monitor/slo/leading.py): it
    moves while they run, TPOT only once they finish. None where its source has no data. `over_target` is
    this instant's reading; `warning` is what SLOTPOTLeadingWarning fires on: over the target at every
    evaluation since `over_target_since`, for `hold_seconds` (its `for`)."""

    seconds: float | None  # the larger of the two estimates
    itl_seconds: float | None  # mean ITL over the last minute
    gen_throughput_seconds: float | None  # running requests / generated tokens per second
    target_seconds: float  # the TPOT target it is compared with
    over_target: bool  # now, one reading
    over_target_since: float | None = None  # over at every evaluation since then (wall clock); None: not over now
    hold_seconds: float = 0.0  # how long it must stay over before it warns (the alert's `for`)
    warning: bool = False  # over for the hold: SLOWING in the status table, as the alert fires


class AvailabilityWindowStatus(BaseModel):
    window: str
    seconds: float
    covered_seconds: float
    requests: float | None  # answered by the gateway in the window (its version's definition)
    failed: float | None  # of those, with a server-side failure
    good_ratio: float | None  # None for an empty window
    burn_rate: float | None


class AvailabilityStatus(BaseModel):
    """The gateway availability SLI (sli="availability"), from the router target's counters."""

    sli: str
    gateway: str  # the version whose counters are read (the config's `gateway:`)
    objective: float
    error_budget_remaining: float | None
    budget_covered_seconds: float
    breaching: bool  # the shortest window's SLI is under the objective
    windows: list[AvailabilityWindowStatus]


class ClientGoneWindowStatus(BaseModel):
    """Requests whose client left before the end of its answer, in one window (docs/goodput.md, "Clients
    that gave up"): no server-side failure, but lost goodput. null: not measured, or nothing measured in the
    window; neither source says how old the requests were when their clients left."""

    window: str
    seconds: float
    covered_seconds: float
    gateway_answered: float | None  # smg 1.13's answers on serving paths
    gateway_client_closed: float | None  # of those, 499 client_closed_request
    gateway_client_closed_ratio: float | None
    server_aborted: float | None  # SGLang's sglang:num_aborted_requests_total on the answering servers


class DeploymentStatus(BaseModel):
    name: str
    model: str
    hardware: str
    cards: int | None
    mode: str
    slis: list[SliStatus]
    load: dict[str, dict[str, float]]
    rates: dict[str, float]
    targets: list[TargetStatusModel]
    warnings: list[str]
    goodput: list[GoodputWindowStatus] = []  # empty without a request-log target
    tpot_leading: TpotLeadingStatus | None = None  # with a TPOT target
    availability: AvailabilityStatus | None = None  # without availability_objective: none
    client_gone: list[ClientGoneWindowStatus] = []  # empty when neither a smg 1.13 listener nor a server is scraped


class LoopStatus(BaseModel):
    """One of the sidecar's loops (monitor.scrape.supervise): a deployment's scrapes, or its own cycle."""

    loop: str  # "scrape" (one per deployment) or "sidecar" (request logs, recording)
    deployment: str | None
    last_cycle_ts: float | None  # wall clock of its last completed cycle; None before the first
    seconds_since_cycle: float  # since that cycle (or since the loop began), on the monotonic clock
    restarts: int  # after an unexpected exception, each logged with its error
    last_error: str | None
    stale: bool  # no completed cycle in a few intervals: /healthz fails with `problem`
    problem: str | None


class RecordingStatus(BaseModel):
    """The sidecar's own SQLite history (monitor.record): is it being written?"""

    path: str
    writing: bool  # False while the latest write failed (disk full, I/O error): /healthz says degraded
    write_errors: int  # failed writes since start
    last_error: str | None  # of the latest failed write while it keeps failing
    failing_since: float | None
    last_write_ts: float | None  # wall clock of the last tick written


class ConfigReloadStatus(BaseModel):
    """The last config reload (SIGHUP or POST /-/reload), as Prometheus reports its own."""

    successful: bool  # the last reload (or the start) loaded the config; False: the previous one still runs
    last_success_ts: float  # when the running config was loaded (start or reload)
    last_attempt_ts: float | None
    last_error: str | None


class SidecarStatus(BaseModel):
    version: str
    started_at: float
    now: float
    scrape_interval_seconds: float
    cycles: int
    last_cycle_seconds: float
    loops: list[LoopStatus] = []
    recording: RecordingStatus | None = None
    config: ConfigReloadStatus | None = None
    degraded: list[str] = []  # what works less than it should, while the SLO state is still served


class PageInfo(BaseModel):
    """Set when /api/v1/status answers one page of a selection (monitor/export/status_query.py)."""

    matching: int  # deployments the filters select, on every page together
    returned: int
    limit: int
    next_page_token: str | None  # pass as page_token for the next page; None on the last


class StatusResponse(BaseModel):
    sidecar: SidecarStatus
    deployments: list[DeploymentStatus]
    page: PageInfo | None = None  # absent from an unpaged answer


def sli_status(s: SliState) -> SliStatus:
    wins = [
        WindowStatus(
            window=w.window, seconds=w.seconds, covered_seconds=w.covered_seconds, events=_f(w.events),
            good_ratio=_f(w.good_ratio), good_ratio_lower=_f(w.good_ratio_lower),
            good_ratio_upper=_f(w.good_ratio_upper), burn_rate=_f(w.burn_rate),
            p50_seconds=_f(w.quantiles.get(0.5)), p90_seconds=_f(w.quantiles.get(0.9)),
            p99_seconds=_f(w.quantiles.get(0.99)), mean_seconds=_f(w.mean),
        )
        for w in s.windows.values()
    ]
    first = next(iter(s.windows.values()), None)
    breaching = bool(first and first.good_ratio is not None and first.good_ratio < s.objective)
    return SliStatus(
        sli=s.sli, target_seconds=s.target_seconds, objective=s.objective, target_is_bucket_edge=s.exact,
        fix_flag=s.fix_flag, error_budget_remaining=_f(s.budget_remaining),
        budget_covered_seconds=s.budget_covered_seconds, breaching=breaching, windows=wins,
    )


def client_gone_status(w: ClientGoneWindow) -> ClientGoneWindowStatus:
    return ClientGoneWindowStatus(
        window=w.window, seconds=w.seconds, covered_seconds=w.covered_seconds, gateway_answered=_f(w.answered),
        gateway_client_closed=_f(w.client_closed), gateway_client_closed_ratio=_f(w.closed_ratio),
        server_aborted=_f(w.aborted))


def availability_status(a: AvailabilityState) -> AvailabilityStatus:
    first = next(iter(a.windows.values()), None)
    return AvailabilityStatus(
        sli=a.sli, gateway=a.gateway, objective=a.objective,
        error_budget_remaining=_f(a.budget_remaining), budget_covered_seconds=a.budget_covered_seconds,
        breaching=bool(first and first.good_ratio is not None and first.good_ratio < a.objective),
        windows=[AvailabilityWindowStatus(window=w.window, seconds=w.seconds, covered_seconds=w.covered_seconds,
                                          requests=_f(w.events), failed=_f(w.failed), good_ratio=_f(w.good_ratio),
                                          burn_rate=_f(w.burn_rate)) for w in a.windows.values()],
    )


def target_status(t: TargetStatus) -> TargetStatusModel:
    return TargetStatusModel(
        id=redact(t.target_id) or "", role=t.role, source=t.source, url=redact(t.url), up=t.up, placeholder=t.placeholder,
        last_error=redact(t.last_error), last_scrape_ts=t.last_scrape_ts, last_success_ts=t.last_success_ts,
        scrape_duration_seconds=t.duration_seconds, samples=t.samples, bytes=t.bytes, scrapes=t.scrapes,
        errors=t.errors, counter_resets=t.resets, format=t.format, detail=t.detail, warnings=list(t.warnings),
        series_retired_early=t.retired_early,
    )


def goodput_status(dep: Deployment, windows: Iterable[WindowGoodput]) -> list[GoodputWindowStatus]:
    """The deployment's goodput windows (from its request-log targets) as `/api/v1/status` shows them."""
    return [GoodputWindowStatus(window=w.window, seconds=w.seconds, requests=w.requests, good=w.good, ratio=w.ratio,
                                missed=dict(w.missed), objective=dep.goodput_objective) for w in windows]


def deployment_status(dep: Deployment, state: DeploymentState, targets: list[TargetStatus],
                      goodput: Iterable[WindowGoodput] = ()) -> DeploymentStatus:
    """`goodput`: the request log's windows of the deployment (none without a request-log target)."""
    return DeploymentStatus(
        name=dep.name, model=dep.model, hardware=dep.hardware, cards=dep.cards, mode=dep.mode,
        slis=[sli_status(s) for s in state.slis.values()],
        load={role: {k: v for k, v in m.items() if _f(v) is not None} for role, m in state.load.items()},
        rates={k: v for k, v in state.rates.items() if _f(v) is not None},
        targets=[target_status(t) for t in targets],
        warnings=list(dep.warnings),
        tpot_leading=None if state.leading_tpot is None else TpotLeadingStatus(
            seconds=_f(state.leading_tpot.seconds), itl_seconds=_f(state.leading_tpot.itl_seconds),
            gen_throughput_seconds=_f(state.leading_tpot.throughput_seconds),
            target_seconds=state.leading_tpot.target_seconds, over_target=state.leading_tpot.over_target,
            over_target_since=state.leading_tpot.over_since, hold_seconds=HOLD_SECONDS,
            warning=state.leading_tpot.warning),
        availability=availability_status(state.availability) if state.availability is not None else None,
        client_gone=[client_gone_status(w) for w in (state.client_gone or {}).values()],
        goodput=goodput_status(dep, goodput),
    )


def loop_status(health: LoopHealth, interval: float) -> LoopStatus:
    problem = health.problem(interval)
    return LoopStatus(loop=health.loop, deployment=health.deployment, last_cycle_ts=health.last_cycle_ts,
                      seconds_since_cycle=health.seconds_since_cycle(), restarts=health.restarts,
                      last_error=health.last_error, stale=problem is not None, problem=problem)


def sidecar_status(started_at: float, now: float, interval: float, cycles: int, last: float,
                   loops: list[LoopStatus] | None = None, *, recording: RecordingStatus | None = None,
                   config: ConfigReloadStatus | None = None, degraded: list[str] | None = None) -> SidecarStatus:
    return SidecarStatus(version=__version__, started_at=started_at, now=now, scrape_interval_seconds=interval,
                         cycles=cycles, last_cycle_seconds=last, loops=loops or [], recording=recording,
                         config=config, degraded=degraded or [])
