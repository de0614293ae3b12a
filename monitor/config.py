"""Configuration: pydantic v2 models loaded from YAML (or JSON), errors naming file and field.

The deployment shape is deliberately flat and equal to what `slo-monitor recipe import --format
json` prints, so an imported recipe is a config the sidecar runs as it is.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from monitor.conventions.names import (
    DEFAULT_GATEWAY,
    GATEWAY_SGLANG_ROUTER,
    GATEWAY_SOURCES,
    GATEWAYS,
    OWN_RULE_FILES,
    RESERVED_ALERT_LABELS,
    SOURCES,
    URL_SOURCES,
    rules_file,
)
from monitor.conventions.policy import (
    MAX_CONFIG_BYTES,
    MAX_DEPLOYMENTS,
    MAX_NAME_CHARS,
    MAX_TARGETS,
    MAX_TARGETS_PER_DEPLOYMENT,
    PERIOD_MAX_SECONDS,
    PERIOD_MIN_SECONDS,
    RECORDING_MIN_FULL_RESOLUTION_SECONDS,
)
from monitor.conventions.slis import SLI_BY_KEY, SLI_RECORDS, SLIS
from monitor.conventions.units import format_duration, parse_duration
from monitor.escaping import LABEL_NAME_RE, excerpt, shorten
from monitor.yaml_bounded import YamlLimitError, load_documents

Role = Literal["server", "prefill", "decode", "router", "npu", "gpu", "request-log"]
Source = Literal[SOURCES]  # type: ignore[valid-type]  # conventions.names: one list of sources
Mode = Literal["pd-mixed", "pd-disaggregated"]
Gateway = Literal[GATEWAYS]  # type: ignore[valid-type]

DEFAULT_SOURCE: dict[str, str] = {
    "server": "sglang",
    "prefill": "sglang",
    "decode": "sglang",
    "router": "router",
    "npu": "npu-smi",
    "gpu": "dcgm",
    "request-log": "request-log",
}
DEFAULT_DETAILS_INTERVAL = 60.0  # seconds between `npu-smi info -t KIND` runs per chip
NpuSmiDetail = Literal["usages", "common", "power", "temp", "memory", "health", "ecc"]
PLACEHOLDER_RE = re.compile(r"<[^<>]+>|\$\{?[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\}?")
SLUG_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")  # fullmatch: `$` would let a trailing newline through
MAX_ERRORS_SHOWN = 20  # of a config's validation errors; the count says how many there are
_CHAR_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space", "\0": "a NUL"}


def _char(ch: str) -> str:
    return _CHAR_NAMES.get(ch) or f"U+{ord(ch):04X}"


def check_bearer_token(token: str | None) -> str | None:
    """A bearer token goes into an `Authorization` header: visible ASCII, no whitespace (RFC 6750's
    b64token is narrower still). The message never shows the token."""
    if token is None:
        return None
    if not token:
        raise ValueError("is empty; leave it out for no token")
    for i, ch in enumerate(token):
        if not "!" <= ch <= "~":
            hint = (" (a YAML `|` block keeps the final newline: use `|-` or a quoted string)"
                    if token.endswith("\n") and i == len(token.rstrip("\n")) else "")
            raise ValueError(f"character {i + 1} of {len(token)} is {_char(ch)}: a bearer token is visible ASCII "
                             f"without spaces or control characters, as it goes into an HTTP header{hint}")
    return token


def check_url(url: str | None) -> str | None:
    """A control character in a URL (a YAML block's final newline) is never meant, and the HTTP client
    would drop it silently. Spaces stay: a recipe's `<your node ip>` placeholder has them."""
    if url is None:
        return None
    for i, ch in enumerate(url):
        if not ch.isprintable():
            raise ValueError(f"character {i + 1} of {len(url)} is {_char(ch)}; a URL has no control characters: "
                             f"{excerpt(url)}")
    return url


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and each bad field."""


class _Strict(BaseModel):
    # No number in a config may be NaN or infinite: an infinite target would make the SLI always 1.0
    # in the sidecar while the generated rules compare with a finite bucket and page forever.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class Target(_Strict):
    """One thing to observe. `url` for HTTP sources, `command` for npu-smi, `path` for request logs."""

    role: Role
    source: Source | None = Field(default=None, description="defaults from role")
    url: str | None = None
    command: list[str] | None = None
    path: str | None = None
    node: str | None = None
    name: str | None = Field(default=None, description="stable id; defaults to role@url")
    timeout_seconds: float | None = Field(default=None, gt=0)
    bearer_token: str | None = Field(default=None, repr=False)
    # Like Prometheus, redirects are not followed unless asked; even then only on the target's own
    # scheme, host and port (never to another host).
    follow_redirects: bool = False
    # Ask for gzip (Prometheus's enable_compression). Unset: not on loopback, where compressing costs
    # the server ~20 ms per 1.5 MB scrape and inflating costs the sidecar more than the bytes save.
    enable_compression: bool | None = None
    # Prometheus's sample_limit: a scrape with more sample lines fails whole ("sample limit exceeded")
    # and the target keeps its previous state. Unset: sidecar.sample_limit.
    sample_limit: int | None = Field(default=None, ge=1)
    # The same for the series the sidecar keeps (the SGLang families it reads). Unset: sidecar.series_limit.
    series_limit: int | None = Field(default=None, ge=1)
    # npu-smi only: also run `npu-smi info -t KIND -i N -c M` per chip and lay what it reports over
    # the table (e.g. `ecc` for error counts, which the table does not show). One process per chip and kind.
    npu_smi_details: list[NpuSmiDetail] | None = None
    # How often each detail is re-run; between runs the last answer is reused (error counts and health move
    # slowly, and a 16-chip node would otherwise start 16 processes per kind every scrape).
    npu_smi_details_interval_seconds: float | None = Field(default=None, gt=0)
    # Which gateway a router target is (smg 1.13 unless said): its availability SLI and the rules read the
    # version's own counters (conventions.AVAILABILITY_SERIES); the sidecar says so when it sees the other one.
    gateway: Gateway | None = None

    @field_validator("bearer_token")
    @classmethod
    def _bearer(cls, v: str | None) -> str | None:
        return check_bearer_token(v)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return check_url(v)

    @model_validator(mode="after")
    def _fill(self) -> Target:
        if self.source is None:
            self.source = DEFAULT_SOURCE[self.role]  # type: ignore[assignment]
        needs_url = self.source in URL_SOURCES
        if needs_url and not self.url:
            raise ValueError(f"source {self.source!r} needs `url` (e.g. http://127.0.0.1:30000/metrics)")
        if self.source == "request-log" and not self.path:
            raise ValueError("source 'request-log' needs `path` (SGLang's --export-metrics-to-file-dir)")
        if self.npu_smi_details and self.source != "npu-smi":
            raise ValueError(f"npu_smi_details applies to source 'npu-smi' only, not {self.source!r}")
        if self.npu_smi_details_interval_seconds is not None and not self.npu_smi_details:
            raise ValueError("npu_smi_details_interval_seconds needs npu_smi_details (e.g. [ecc])")
        if self.gateway is not None and self.source not in GATEWAY_SOURCES:
            raise ValueError(f"gateway applies to a gateway's targets (source router or router-engine-metrics), "
                             f"not {self.source!r}")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {excerpt(self.url)}")
        return self

    @property
    def details_interval(self) -> float:
        return self.npu_smi_details_interval_seconds or DEFAULT_DETAILS_INTERVAL

    @property
    def id(self) -> str:
        return self.name or f"{self.role}@{self.url or self.path or ' '.join(self.command or ['npu-smi'])}"

    @property
    def has_placeholder(self) -> bool:
        return bool(PLACEHOLDER_RE.search(self.url or "") or PLACEHOLDER_RE.search(self.path or ""))


class Baseline(_Strict):
    """What the recipe measured; a regression alert compares live numbers with it."""

    ttft_mean_seconds: float | None = Field(default=None, gt=0)
    tpot_mean_seconds: float | None = Field(default=None, gt=0)
    output_throughput_tokens_per_second: float | None = Field(default=None, gt=0)
    source: str | None = None


class Deployment(_Strict):
    name: str
    model: str = "unknown"
    hardware: str = "unknown"
    cards: int | None = Field(default=None, ge=1)
    mode: Mode = "pd-mixed"
    dataset: str | None = None
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    prefix_cache_hit: float | None = Field(default=None, ge=0, le=1)
    image_inputs: str | None = None
    quantization: str | None = None
    # One optional target per SLI record (`tpot_target_seconds`, ...): the SLI exists only when it is set.
    for _sli in SLI_RECORDS:
        __annotations__[_sli.target_field] = "float | None"
        vars()[_sli.target_field] = Field(default=None, gt=0)
    del _sli
    objective: float = Field(default=0.99, gt=0, lt=1)
    # Optional goodput SLO: this share of requests must succeed *and* meet every latency target
    # (computed per request from a request-log target). Usually below `objective`: meeting each
    # SLI 99% of the time does not make 99% of requests meet all of them.
    goodput_objective: float | None = Field(default=None, gt=0, lt=1)
    # Optional availability SLO: this share of the requests the gateway answers must have no server-side
    # failure (a 5xx, or a stream broken mid-body where the gateway sees it), from a router target.
    availability_objective: float | None = Field(default=None, gt=0, lt=1)
    period: str = "30d"
    # Accept an SLI whose target is not a bucket edge (interpolated, reported as approximate).
    approximate: bool = False
    # Bucket lists the servers were launched with (--bucket-*); defaults are SGLang 0.5.23's.
    buckets: dict[str, list[float]] = Field(default_factory=dict)
    baseline: Baseline | None = None
    targets: list[Target] = Field(default_factory=list)
    launch: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        # Before the targets are validated one by one: 100,000 of them took 17 s to refuse.
        targets = data.get("targets") if isinstance(data, dict) else None
        if isinstance(targets, list) and len(targets) > MAX_TARGETS_PER_DEPLOYMENT:
            raise ValueError(f"{len(targets):,} targets; a deployment may have {MAX_TARGETS_PER_DEPLOYMENT:,} at "
                             "most (split it, or shard: docs/scale-out.md)")
        return data

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if len(v) > MAX_NAME_CHARS:  # it becomes file names (alerts/rules/<name>.rules.yml, ...)
            raise ValueError(f"{len(v):,} characters; a deployment name has {MAX_NAME_CHARS} at most")
        if not SLUG_RE.fullmatch(v):
            raise ValueError("must be a slug: lowercase letters, digits, '.', '_' or '-', e.g. kimi-k2-6-pd-16p")
        if v in OWN_RULE_FILES:  # its rules file would be the sidecar's own, and one of the two lost
            raise ValueError(f"{v!r} is the name of the generated alerts/{rules_file(v)}; choose another")
        return v

    @field_validator("period")
    @classmethod
    def _period(cls, v: str) -> str:
        # The budget is a `sum_over_time` over the period in the generated rules: an hour at least (a 0s
        # period gives a [1ms] range), a year at most (Prometheus refuses a 100000000d range).
        if not PERIOD_MIN_SECONDS <= parse_duration(v) <= PERIOD_MAX_SECONDS:
            raise ValueError(f"must be between {format_duration(PERIOD_MIN_SECONDS)} and "
                             f"{format_duration(PERIOD_MAX_SECONDS)}, got {v!r}")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        # Added to every alert of the deployment; any value is fine (escaped where it lands).
        for name in v:
            if not LABEL_NAME_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not a Prometheus label name (letters, digits and '_', not "
                                 "starting with a digit)")
            if name.startswith("__") or name in RESERVED_ALERT_LABELS:
                raise ValueError(f"{name!r} is reserved: the generated alerts set it (or Prometheus does, for "
                                 f"`__` names); reserved: {', '.join(sorted(RESERVED_ALERT_LABELS))}")
        return v

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, v: dict[str, list[float]]) -> dict[str, list[float]]:
        for sli, edges in v.items():
            if sli not in SLIS:
                raise ValueError(f"unknown SLI {sli!r}; expected one of {', '.join(SLIS)}")
            if sorted(edges) != list(edges) or len(set(edges)) != len(edges):
                raise ValueError(f"{sli} bucket edges must be strictly increasing")
        return v

    @model_validator(mode="after")
    def _ids_unique(self) -> Deployment:
        dup = [k for k, n in Counter(t.id for t in self.targets).items() if n > 1]
        if dup:
            raise ValueError(f"duplicate target {dup[0]!r}; give each a distinct url or name")
        return self

    @model_validator(mode="after")
    def _goodput_has_a_source(self) -> Deployment:
        if self.goodput_objective is not None and not self.has_request_log:
            raise ValueError("goodput_objective needs a target with role: request-log and the `path` of SGLang's "
                             "--export-metrics-to-file-dir (goodput is computed per request from those files)")
        return self

    @model_validator(mode="after")
    def _availability_has_a_gateway(self) -> Deployment:
        gateways = {t.gateway for t in self.targets if t.gateway}
        if len(gateways) > 1:
            raise ValueError(f"the gateway targets say different gateways ({', '.join(sorted(gateways))}); one "
                             "deployment runs one gateway version (`gateway:` on its router targets)")
        if self.availability_objective is None:
            return self
        if not self.router_targets:
            raise ValueError("availability_objective needs a target with role: router (source router: the "
                             "gateway's Prometheus listener, its --prometheus-port); availability is counted "
                             "from the gateway's request and response counters")
        if self.gateway == GATEWAY_SGLANG_ROUTER and self.mode == "pd-disaggregated" and any(
                t.source == "router-engine-metrics" for t in self.targets):
            raise ValueError("availability_objective with gateway sglang-router-0.3.2 and a router-engine-metrics "
                             "target: 0.3.2 answers /engine_metrics of a PD pair with HTTP 500 at every scrape "
                             "and counts those 500s with the requests' (its responses have no path label), so "
                             "the SLI would burn on the scrapes; scrape the workers' /metrics directly instead")
        return self

    @property
    def router_targets(self) -> list[Target]:
        """The gateway's own listeners (source router), whose counters feed the availability SLI."""
        return [t for t in self.targets if t.source == "router"]

    @property
    def gateway(self) -> str:
        """The gateway version the deployment runs (`gateway:` on its router targets; smg 1.13 unless said)."""
        return next((t.gateway for t in self.targets if t.gateway), DEFAULT_GATEWAY)

    @property
    def has_request_log(self) -> bool:
        return any(t.source == "request-log" for t in self.targets)

    def target_seconds(self, sli: str) -> float | None:
        return getattr(self, SLI_BY_KEY[sli].target_field)

    @property
    def slis(self) -> list[str]:
        return [s for s in SLIS if self.target_seconds(s) is not None]

    @property
    def period_seconds(self) -> int:
        return parse_duration(self.period)


class SidecarSettings(_Strict):
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(default=9464, ge=0, le=65535)
    scrape_interval_seconds: float = Field(default=5.0, gt=0)
    scrape_timeout_seconds: float = Field(default=3.0, gt=0)
    max_response_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_concurrent_scrapes: int = Field(default=64, ge=1)
    # Per-target defaults of the limits above (None: unlimited, Prometheus's 0). A 32-DP-rank server
    # keeps ~550 series; the series limit stops a runaway label (1M series) before it costs memory.
    sample_limit: int | None = Field(default=None, ge=1)
    series_limit: int | None = Field(default=50_000, ge=1)
    # Where a scraped body is parsed (monitor/scrape/parsing.py): up to parse_inline_max_bytes on the event
    # loop; from parse_process_min_bytes in a pool of parse_workers processes (None: os.cpu_count(); 0:
    # none); in between, and when there are no processes, in a thread beside the loop (on the loop when
    # it is the only parse in a while: the hand-over costs more than it gives back then).
    parse_inline_max_bytes: int = Field(default=256 * 1024, ge=0)
    parse_process_min_bytes: int = Field(default=4 * 1024 * 1024, ge=0)
    parse_workers: int | None = Field(default=None, ge=0)
    # Scrape each deployment at its own stable phase within the interval (like Prometheus).
    stagger_scrapes: bool = True
    # SQLite file of the sidecar's own history (snapshots, state, accumulators); None disables it.
    recording_path: str | None = None
    recording_interval_seconds: float = Field(default=15.0, gt=0)
    recording_retention: str = "1d"
    # Rows older than this are thinned to one per minute, past 6 h to one per 5 minutes (docs/recording.md).
    recording_full_resolution: str = "1h"
    api_bearer_token: str | None = Field(default=None, repr=False)
    # POST /-/reload reloads the config only when this is on, as Prometheus's only with --web.enable-lifecycle:
    # an endpoint that acts is opt-in (SIGHUP always reloads). Read at start.
    enable_lifecycle: bool = False
    # A connection to the sidecar's port must deliver a whole request within this many seconds of
    # opening (or of its previous response), else it is closed: half-sent requests hold nothing.
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    # Connections open at once on the sidecar's port; the excess is closed at accept (a 503, nothing
    # parsed) and counted. None: derived from the open-files limit (monitor/fdlimit.py).
    max_connections: int | None = Field(default=None, ge=1)
    # At start the soft open-files limit (RLIMIT_NOFILE) is raised toward the hard one, up to this
    # (never lowered); 0 leaves it as it is. The usual soft 1024 is what 1,100 idle connections exhaust.
    open_files_limit: int = Field(default=65536, ge=0)
    otlp_endpoint: str | None = None
    otlp_interval_seconds: float = Field(default=15.0, gt=0)

    @field_validator("api_bearer_token")
    @classmethod
    def _api_bearer(cls, v: str | None) -> str | None:
        return check_bearer_token(v)

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_url(cls, v: str | None) -> str | None:
        return check_url(v)

    @field_validator("recording_retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        parse_duration(v)
        return v

    @field_validator("recording_full_resolution")
    @classmethod
    def _full_resolution(cls, v: str) -> str:
        if parse_duration(v) < RECORDING_MIN_FULL_RESOLUTION_SECONDS:
            raise ValueError(f"must be at least {RECORDING_MIN_FULL_RESOLUTION_SECONDS / 60:.0f}m (the SLO windows "
                             "keep every snapshot that long, so a restart must find them in the recording)")
        return v

    @model_validator(mode="after")
    def _timeout_le_interval(self) -> SidecarSettings:
        if self.scrape_timeout_seconds > self.scrape_interval_seconds:
            raise ValueError("scrape_timeout_seconds must not exceed scrape_interval_seconds")
        return self


class Config(_Strict):
    sidecar: SidecarSettings = Field(default_factory=SidecarSettings)
    deployments: list[Deployment] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        deps = data.get("deployments") if isinstance(data, dict) else None
        if not isinstance(deps, list):
            return data
        if len(deps) > MAX_DEPLOYMENTS:
            raise ValueError(f"{len(deps):,} deployments; a config may have {MAX_DEPLOYMENTS:,} at most (shard: "
                             "docs/scale-out.md)")
        total = sum(len(d["targets"]) for d in deps if isinstance(d, dict) and isinstance(d.get("targets"), list))
        if total > MAX_TARGETS:
            raise ValueError(f"{total:,} targets; a config may have {MAX_TARGETS:,} at most (shard: "
                             "docs/scale-out.md)")
        return data

    @model_validator(mode="after")
    def _names_unique(self) -> Config:
        dup = [k for k, n in Counter(d.name for d in self.deployments).items() if n > 1]
        if dup:
            raise ValueError(f"two deployments are named {dup[0]!r}; names must be unique")
        return self

    def deployment(self, name: str) -> Deployment:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment named {name!r}; known: {', '.join(d.name for d in self.deployments)}")


def _loc(loc: tuple[Any, ...], data: Any) -> str:
    """`deployments[2] (kimi-pd).targets[0].url` from a pydantic error location."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    label += f" ({shorten(node['name'], 60)})"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(top level)"


def format_validation_error(err: ValidationError, source: str, data: Any) -> str:
    """One line per error (the first MAX_ERRORS_SHOWN), each naming the field; an input value appears as
    a short excerpt only (`repr` of a large one took a minute and printed gigabytes)."""
    count = err.error_count()
    lines = [f"{source}: invalid config ({count:,} error{'s' if count > 1 else ''})"]
    for e in err.errors(include_input=False, include_url=False)[:MAX_ERRORS_SHOWN]:
        where = _loc(tuple(e["loc"]), data)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        elif e["type"] == "literal_error":
            msg = f"{msg}; got {excerpt(_at(tuple(e['loc']), data))}"
        lines.append(f"  {shorten(where, 200)}: {shorten(msg)}")
    if count > MAX_ERRORS_SHOWN:
        lines.append(f"  ... and {count - MAX_ERRORS_SHOWN:,} more")
    return "\n".join(lines)


def _at(loc: tuple[Any, ...], data: Any) -> Any:
    """The input value at a pydantic error location (pydantic's own copy of it is not needed)."""
    node = data
    for item in loc:
        in_list = isinstance(item, int) and isinstance(node, list) and 0 <= item < len(node)
        if not (in_list or isinstance(node, dict) and item in node):
            return None
        node = node[item]
    return node


def is_openslo(docs: list[Any]) -> bool:
    """Several YAML documents, or one with an `apiVersion: openslo/...`: OpenSLO, not a sidecar config."""
    return len(docs) > 1 or bool(docs and isinstance(docs[0], dict) and _says_openslo(docs[0]))


def _says_openslo(doc: dict[Any, Any]) -> bool:
    # Only a string can say so: `str()` of any other value walks all of it (a YAML alias graph: minutes).
    version = doc.get("apiVersion")
    return isinstance(version, str) and version.startswith("openslo")


def parse_config(data: Any, source: str = "<config>") -> Config:
    if data is None:
        data = {}
    if isinstance(data, dict) and "deployments" not in data and _says_openslo(data):
        raise ConfigError(f"{source}: an OpenSLO document; load it with `monitor.interop.load.load_config` "
                          "(every slo-monitor command does)")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with `deployments:` at the top, got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, data)) from None


def read_documents(path: str | Path) -> list[Any]:
    """The non-empty YAML (or JSON) documents of a file; errors name the file and line."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # no more, whatever the file is (a device, a huge log)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config: {err.strerror or err}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: more than {MAX_CONFIG_BYTES // 2**20} MiB: refused (not a config?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 (byte {err.start})") from None
    try:
        return [d for d in load_documents(text) if d is not None]
    except YamlLimitError as err:
        raise ConfigError(f"{path}:{f' line {err.line}:' if err.line else ''} {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} not valid YAML: {getattr(err, 'problem', err)}") from None


def load_config(path: str | Path) -> Config:
    """A sidecar config file (OpenSLO input is the interop package's: `monitor.interop.load`)."""
    docs = read_documents(path)
    if is_openslo(docs):
        raise ConfigError(f"{path}: OpenSLO documents; load them with `monitor.interop.load.load_config` "
                          "(every slo-monitor command does)")
    return parse_config(docs[0] if docs else {}, str(path))
