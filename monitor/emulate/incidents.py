"""Incidents: what can go wrong with an emulated deployment, and how each one moves the model.

CLI spec: `DEPLOYMENT:KIND[:FACTOR][@START+DURATION][~RAMP]`, START, DURATION and RAMP in seconds of
emulated time or as `30s`/`5m`/`1h` (`@+5m` starts now for 5 minutes, `@2m` starts at 2 minutes and lasts
until cleared, `~2m` ramps in linearly over 2 minutes instead of stepping). Times are emulated seconds since
the emulator started.

Overheating is thermal whatever the ramp: the chip heats towards HEAT_PER_SLOWDOWN degrees per unit of
slowdown above its normal temperature with a THERMAL_TAU time constant, throttles (decode slows) once it is
THROTTLE_MARGIN_CELSIUS past where its cooling holds it, in proportion to how far, and cools the same way after
the incident ends. A full KV cache
(`hbm_full`) leaves `factor` of the pool's tokens to the requests: SGLang preallocates the pool at start, so the
chip's HBM use does not move; the tokens lost count as used in token usage, fewer requests are admitted by tokens
and decodes that no longer fit are retracted (kv_budget.py).

`effects()` sums up the incidents active on one role at one time; `Effects` says what that does to the
engine: decode step times and the accepted speculative length (a request's decode rate), prefill time,
arrivals, the KV pool's tokens left, KV transfers that
fail, the chip's temperature, and whether the server answers at all.
"""

from __future__ import annotations

import itertools
import math
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
    "npu_overheat",  # chip heats (HEAT_PER_SLOWDOWN per unit of `factor`) and throttles: decode and prefill up to
    # `factor` slower (a throttle lowers the clocks every kernel runs at, not one phase's)
    "hbm_full",  # the KV cache full: `factor` (0..1) of the pool's tokens is left; fewer admitted, decodes retracted
    "metrics_disabled",  # /metrics answers 404 (server launched without --enable-metrics)
    "kv_transfer_failure",  # PD: this share (`factor`, 0..1) of KV transfers fails; the request aborts
    "spec_accept_drop",  # speculative decoding accepts `factor` times fewer tokens per step (no effect without it)
    "client_timeout",  # clients hang up on requests still unanswered `factor` seconds after sending them
)
DEFAULT_FACTOR: dict[str, float] = {
    "tpot_regression": 2.0, "ttft_spike": 4.0, "queue_buildup": 3.0, "npu_overheat": 1.5,
    "kv_transfer_failure": 0.5, "hbm_full": 0.7, "spec_accept_drop": 2.0, "client_timeout": 10.0,
}
# Overheating: degrees Celsius above the chip's normal temperature per unit of slowdown (x1.5 -> +20 degC), and
# the time constant the chip heats and cools with (a first-order thermal response, not a step).
HEAT_PER_SLOWDOWN = 40.0
THERMAL_TAU = 40.0
# A chip throttles only past its throttle point: this far above where its cooling holds it at its load (a healthy
# chip never gets there). Past it the clocks drop in proportion, to the full `factor` at the incident's full heat,
# so the warming leads the slowdown (a weak x1.2, +8 degC, throttles once it has warmed by 2).
THROTTLE_MARGIN_CELSIUS = 2.0
RAMP_STEP = 5.0  # while an incident ramps (or a chip heats or cools), rates are recomputed this often
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
    ramp: float = 0.0  # seconds to reach full strength from the start (0: a step)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind == "kv_transfer_failure" and not 0 < self.factor <= 1:
            raise ValueError(f"kv_transfer_failure: factor is the share of transfers that fail (0 < f <= 1), "
                             f"got {self.factor:g}")
        if self.kind == "hbm_full" and not 0 < self.factor <= 1:
            raise ValueError(f"hbm_full: factor is the share of the KV pool left (0 < f <= 1), got {self.factor:g}")
        if self.kind == "spec_accept_drop" and self.factor < 1:
            raise ValueError(f"spec_accept_drop: factor is how many times the accept length falls (>= 1), "
                             f"got {self.factor:g}")
        if self.factor <= 0:
            raise ValueError("incident factor must be > 0")
        if self.duration is not None and self.duration < 0:
            raise ValueError("incident duration must be >= 0")
        if self.ramp < 0:
            raise ValueError("incident ramp must be >= 0")
        if not self.id:
            self.id = next(_ids)

    @property
    def end(self) -> float | None:
        return None if self.duration is None else self.start + self.duration

    def active(self, now: float) -> bool:
        return self.start <= now and (self.end is None or now < self.end)

    def strength(self, now: float) -> float:
        """How much of the incident is in effect (0..1): the linear ramp, or for overheating how hot the chip
        has got (heating while active, cooling after)."""
        if now < self.start:
            return 0.0
        if self.kind == "npu_overheat":
            hot = 1.0 - math.exp(-(min(now, self.end if self.end is not None else now) - self.start) / THERMAL_TAU)
            return hot * (math.exp(-(now - self.end) / THERMAL_TAU) if self.end is not None and now > self.end else 1.0)
        if not self.active(now):
            return 0.0
        return min(1.0, (now - self.start) / self.ramp) if self.ramp > 0 else 1.0

    def in_effect(self, now: float) -> bool:
        """Active, or (a chip) still cooling down: effects() counts it."""
        if self.kind == "npu_overheat" and self.end is not None and now >= self.end:
            return now - self.end < 5 * THERMAL_TAU
        return self.active(now)

    def change_points(self) -> list[float]:
        """Emulated times its effects change at: start and end, and every RAMP_STEP while ramping or
        heating and cooling."""
        points = [self.start] + ([self.end] if self.end is not None else [])
        if self.kind == "npu_overheat":
            spans = [(self.start, self.end if self.end is not None else self.start + 5 * THERMAL_TAU)]
            if self.end is not None:
                spans.append((self.end, self.end + 5 * THERMAL_TAU))
        else:
            spans = [(self.start, self.start + min(self.ramp, self.duration if self.duration is not None
                                                   else self.ramp))] if self.ramp > 0 else []
        for a, b in spans:
            points += [a + RAMP_STEP * k for k in range(1, int((b - a) / RAMP_STEP) + 1)]
        return sorted(set(points))

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
    spec, tilde, ramp = spec.partition("~")
    body, _, when = spec.partition("@")
    parts = body.split(":")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"incident {spec!r}: expected DEPLOYMENT:KIND[:FACTOR][@START+DURATION][~RAMP]")
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
    return Incident(deployment, kind, factor, start, duration, role, ramp=_seconds(ramp) if tilde else 0.0)


@dataclass(frozen=True)
class Effects:
    """Multipliers and flags that the active incidents put on one server."""

    tpot: float = 1.0
    ttft: float = 1.0
    arrivals: float = 1.0
    hbm_full: bool = False
    kv_share: float = 1.0  # share of the KV pool's tokens left (hbm_full)
    accept_drop: float = 1.0  # speculative accept length divided by this
    overheat: bool = False
    heat: float = 0.0  # degrees Celsius an overheating chip runs above its normal temperature
    throttle: float = 1.0  # how much slower an overheating chip runs (part of `tpot`): it draws less power
    down: bool = False
    metrics_disabled: bool = False
    transfer_failure: float = 0.0  # probability that a KV transfer fails
    client_timeout: float | None = None  # seconds a client waits for its whole answer (None: as long as it takes)

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

    def pool_lost(self, total: int) -> int:
        """Tokens of a KV pool of `total` that no request can have while the KV cache is full (`hbm_full`):
        SGLang's pool is preallocated, so what it lost is held (a leak, pinned cache), not given back to HBM."""
        return int(total * (1.0 - self.kv_share)) if self.hbm_full else 0

    def arrival_rate(self, base: float, nominal: float) -> float:
        """Synthetic arrivals per second; `queue_buildup` adds other clients even with synthetic load off."""
        return base * self.arrivals if base > 0 else nominal * max(self.arrivals - 1.0, 0.0)

    def transfer_fails(self, rng: random.Random) -> bool:
        """Whether this KV transfer fails (a draw only while an incident makes transfers fail)."""
        fail = self.transfer_failure
        return bool(fail) and rng.random() < fail

    def chip_temperature(self, normal: float) -> float:
        """The chip's temperature: its normal one (load and spread) plus what overheating adds."""
        return normal + self.heat

    def chip_power(self, idle: float, dynamic: float) -> float:
        """Watts: a throttled chip runs its clocks slower and draws less for the same work."""
        return idle + dynamic / self.throttle


def _toward(factor: float, strength: float) -> float:
    """A multiplier `strength` of the way from 1 to `factor`."""
    return 1.0 + (factor - 1.0) * strength


def effects(incidents: list[Incident], role: str, now: float) -> Effects:
    tpot = ttft = arrivals = kv_share = accept_drop = throttle = 1.0
    transfer_ok = 1.0
    heat = 0.0
    patience: float | None = None
    flags = {"hbm_full": False, "overheat": False, "down": False, "metrics_disabled": False}
    for inc in incidents:
        # Arrivals come from the clients in front of the whole deployment, whatever the role.
        if not inc.in_effect(now) or (inc.kind != "queue_buildup" and not inc.applies_to(role)):
            continue
        k = inc.strength(now)
        if inc.kind == "tpot_regression":
            tpot *= _toward(inc.factor, k)
        elif inc.kind == "npu_overheat":
            full = HEAT_PER_SLOWDOWN * max(inc.factor - 1.0, 0.0)
            throttle *= _toward(inc.factor, max(0.0, full * k - THROTTLE_MARGIN_CELSIUS) /
                                (full - THROTTLE_MARGIN_CELSIUS)) if full > THROTTLE_MARGIN_CELSIUS else 1.0
            heat += full * k
            flags["overheat"] = flags["overheat"] or inc.active(now)
        elif inc.kind == "ttft_spike":
            ttft *= _toward(inc.factor, k)
        elif inc.kind == "queue_buildup":
            arrivals *= _toward(inc.factor, k)
        elif inc.kind == "hbm_full":
            flags["hbm_full"] = True
            kv_share = min(kv_share, _toward(inc.factor, k))
        elif inc.kind == "spec_accept_drop":
            accept_drop *= _toward(inc.factor, k)
        elif inc.kind in ("down", "restart"):
            # A restart with a duration is down while it restarts; a bare restart is instant.
            flags["down"] = flags["down"] or inc.kind == "down" or bool(inc.duration)
        elif inc.kind == "metrics_disabled":
            flags["metrics_disabled"] = True
        elif inc.kind == "kv_transfer_failure":
            transfer_ok *= 1.0 - inc.factor * k
        elif inc.kind == "client_timeout":
            patience = inc.factor if patience is None else min(patience, inc.factor)
    return Effects(tpot * throttle, ttft * throttle, arrivals, kv_share=kv_share, accept_drop=accept_drop, **flags,
                   heat=heat, throttle=throttle, transfer_failure=1.0 - transfer_ok, client_timeout=patience)


def restarting(incidents: list[Incident], role: str, now: float) -> bool:
    """A restart with a duration is under way on `role`: its servers take no new requests."""
    return any(i.kind == "restart" and i.duration and i.active(now) and i.applies_to(role) for i in incidents)
