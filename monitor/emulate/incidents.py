"""Incidents: what can go wrong with an emulated deployment, and how each one moves the model.

CLI spec: `DEPLOYMENT:KIND[:FACTOR][@START+DURATION]`, START and DURATION in seconds of emulated time
or as `30s`/`5m`/`1h` (`@+5m` starts now for 5 minutes, `@2m` starts at 2 minutes and lasts until
cleared). Times are emulated seconds since the emulator started.

`effects()` sums up the incidents active on one role at one time; `Effects` says what that does to the
engine: decode step times and the accepted speculative length (a request's decode rate), prefill time,
arrivals, the KV slots left (fewer requests fit; the scheduler retracts the rest), KV transfers that
fail, the chip's temperature and HBM, and whether the server answers at all.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass
from typing import Any

from monitor.conventions.units import parse_duration

KINDS: tuple[str, ...] = (
    "tpot_regression",  # decode slower by `factor`
    "ttft_spike",  # prefill slower by `factor`
    "queue_buildup",  # arrivals x `factor`: queue grows, TTFT and TPOT rise
    "restart",  # counters reset (fresh registry, new pid); down for `duration` if given
    "down",  # listener closed: the port refuses connections until it ends
    "npu_overheat",  # chip temperature up, decode slower by `factor`
    "hbm_full",  # HBM use and token_usage near 100 %: `factor` (0..1) of the KV slots is left; the excess retracted
    "metrics_disabled",  # /metrics answers 404 (server launched without --enable-metrics)
    "kv_transfer_failure",  # PD: this share (`factor`, 0..1) of KV transfers fails; the request aborts
    "spec_accept_drop",  # speculative decoding accepts `factor` times fewer tokens per step (no effect without it)
)
DEFAULT_FACTOR: dict[str, float] = {
    "tpot_regression": 2.0, "ttft_spike": 4.0, "queue_buildup": 3.0, "npu_overheat": 1.5,
    "kv_transfer_failure": 0.5, "hbm_full": 0.7, "spec_accept_drop": 2.0,
}
_ids = itertools.count(1)


@dataclass
class Incident:
    deployment: str
    kind: str
    factor: float = 1.0
    start: float = 0.0
    duration: float | None = None  # None: until cleared
    role: str | None = None  # server | prefill | decode; None: every server of the deployment
    id: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind == "kv_transfer_failure" and not 0 < self.factor <= 1:
            raise ValueError(f"kv_transfer_failure: factor is the share of transfers that fail (0 < f <= 1), "
                             f"got {self.factor:g}")
        if self.kind == "hbm_full" and not 0 < self.factor <= 1:
            raise ValueError(f"hbm_full: factor is the share of KV slots left (0 < f <= 1), got {self.factor:g}")
        if self.kind == "spec_accept_drop" and self.factor < 1:
            raise ValueError(f"spec_accept_drop: factor is how many times the accept length falls (>= 1), "
                             f"got {self.factor:g}")
        if self.factor <= 0:
            raise ValueError("incident factor must be > 0")
        if self.duration is not None and self.duration < 0:
            raise ValueError("incident duration must be >= 0")
        if not self.id:
            self.id = next(_ids)

    @property
    def end(self) -> float | None:
        return None if self.duration is None else self.start + self.duration

    def active(self, now: float) -> bool:
        return self.start <= now and (self.end is None or now < self.end)

    def applies_to(self, role: str) -> bool:
        return self.role is None or self.role == role

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seconds(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return float(parse_duration(text))


def parse_spec(spec: str, now: float = 0.0) -> Incident:
    """`kimi-pd:tpot_regression:2.5@+10m` -> Incident starting at `now` for 600 s."""
    body, _, when = spec.partition("@")
    parts = body.split(":")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"incident {spec!r}: expected DEPLOYMENT:KIND[:FACTOR][@START+DURATION]")
    deployment, kind = parts[0], parts[1]
    role = None
    if "/" in deployment:  # deployment/role targets one role of a PD deployment
        deployment, role = deployment.split("/", 1)
    factor = float(parts[2]) if len(parts) > 2 and parts[2] else DEFAULT_FACTOR.get(kind, 1.0)
    start, duration = now, None
    if when:
        first, plus, rest = when.partition("+")
        start = now + _seconds(first) if first else now
        duration = _seconds(rest) if plus else None
    return Incident(deployment, kind, factor, start, duration, role)


@dataclass(frozen=True)
class Effects:
    """Multipliers and flags that the active incidents put on one server."""

    tpot: float = 1.0
    ttft: float = 1.0
    arrivals: float = 1.0
    hbm_full: bool = False
    kv_share: float = 1.0  # share of the KV slots left (hbm_full)
    accept_drop: float = 1.0  # speculative accept length divided by this
    overheat: bool = False
    down: bool = False
    metrics_disabled: bool = False
    transfer_failure: float = 0.0  # probability that a KV transfer fails

    def accepted(self, accept: float) -> float:
        """Tokens accepted per verify step under an accept-length drop (never below the one token a step
        makes); 0 without speculative decoding."""
        return max(1.0, accept / self.accept_drop) if accept else 0.0

    def step_time(self, batch_factor: float) -> float:
        """A decode step relative to the reference batch: the batch's own factor times the incidents'."""
        return batch_factor * self.tpot

    def decode_rate(self, base_tpot: float, step: float, accept: float) -> float:
        """Seconds per token of one request at `step` (`step_time`): fewer draft tokens accepted per verify
        step means more steps for the same tokens."""
        return base_tpot * step * (accept / self.accepted(accept) if accept else 1.0)

    def kv_slots(self, capacity: int) -> int:
        """Running slots of a rank: full HBM leaves fewer KV slots, so fewer requests fit and the rest wait."""
        return max(1, int(capacity * self.kv_share)) if self.hbm_full else capacity

    def token_usage(self, usage: float) -> float:
        """The KV pool's usage as the scheduler reports it: near 100 % while HBM is full."""
        return max(usage, 0.97) if self.hbm_full else usage

    def arrival_rate(self, base: float, nominal: float) -> float:
        """Synthetic arrivals per second; `queue_buildup` adds other clients even with synthetic load off."""
        return base * self.arrivals if base > 0 else nominal * max(self.arrivals - 1.0, 0.0)

    def transfer_fails(self, rng: random.Random) -> bool:
        """Whether this KV transfer fails (a draw only while an incident makes transfers fail)."""
        fail = self.transfer_failure
        return bool(fail) and rng.random() < fail

    def chip_temperature(self, normal: float, wobble: float) -> float:
        """An overheating chip runs at about 96 degC whatever its load."""
        return 96.0 + 3.0 * wobble if self.overheat else normal

    def hbm_used(self, normal: float, total: float) -> float:
        """HBM in use (MB): all of it while HBM is full."""
        return total * 0.995 if self.hbm_full else normal


def effects(incidents: list[Incident], role: str, now: float) -> Effects:
    tpot = ttft = arrivals = kv_share = accept_drop = 1.0
    transfer_ok = 1.0
    flags = {"hbm_full": False, "overheat": False, "down": False, "metrics_disabled": False}
    for inc in incidents:
        # Arrivals come from the clients in front of the whole deployment, whatever the role.
        if not inc.active(now) or (inc.kind != "queue_buildup" and not inc.applies_to(role)):
            continue
        if inc.kind == "tpot_regression":
            tpot *= inc.factor
        elif inc.kind == "npu_overheat":
            tpot *= inc.factor
            flags["overheat"] = True
        elif inc.kind == "ttft_spike":
            ttft *= inc.factor
        elif inc.kind == "queue_buildup":
            arrivals *= inc.factor
        elif inc.kind == "hbm_full":
            flags["hbm_full"] = True
            kv_share = min(kv_share, inc.factor)
        elif inc.kind == "spec_accept_drop":
            accept_drop *= inc.factor
        elif inc.kind in ("down", "restart"):
            # A restart with a duration is down while it restarts; a bare restart is instant.
            flags["down"] = flags["down"] or inc.kind == "down" or bool(inc.duration)
        elif inc.kind == "metrics_disabled":
            flags["metrics_disabled"] = True
        elif inc.kind == "kv_transfer_failure":
            transfer_ok *= 1.0 - inc.factor
    return Effects(tpot, ttft, arrivals, kv_share=kv_share, accept_drop=accept_drop, **flags,
                   transfer_failure=1.0 - transfer_ok)


def restarting(incidents: list[Incident], role: str, now: float) -> bool:
    """A restart with a duration is under way on `role`: its servers take no new requests."""
    return any(i.kind == "restart" and i.duration and i.active(now) and i.applies_to(role) for i in incidents)
