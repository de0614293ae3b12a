"""`slo-monitor status`: a live terminal table of deployments against their targets."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence

from monitor.conventions.slis import ENGINE_ROLES, SLI_BY_KEY
from monitor.status_model import ClientGoneWindowStatus, DeploymentStatus, SliStatus, StatusResponse

RED, GREEN, YELLOW, DIM, RESET = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[2m", "\x1b[0m"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.2f}%"


def _sli_cells(s: SliStatus | None) -> list[str]:
    if s is None:
        return ["-", "-", "-", "-", "-"]
    w5 = next((w for w in s.windows if w.window == "5m"), None)
    w1h = next((w for w in s.windows if w.window == "1h"), None)
    approx = "" if s.target_is_bucket_edge else "~"
    return [
        f"{_ms(s.target_seconds)}",
        f"{_ms(w5.p99_seconds if w5 else None)}",
        f"{approx}{_pct(w5.good_ratio if w5 else None)}",
        "-" if w1h is None or w1h.burn_rate is None else f"{w1h.burn_rate:.1f}x",
        _pct(s.error_budget_remaining),
    ]


# The two SLIs with columns of their own; every other SLI a deployment has (ITL, E2E, queue time, any SLI
# record added later) is summarised in one column, so a new SLI shows without a change here.
OWN_COLUMNS = ("tpot", "ttft")


def _other_slis(slis: Sequence[SliStatus]) -> str:
    """`Queue time 99.10% E2E latency ~98.00%`: the 5m good ratio of each other SLI, `!` when breaching."""
    cells = []
    for s in slis:
        if s.sli in OWN_COLUMNS or s.sli not in SLI_BY_KEY:
            continue
        w5 = next((w for w in s.windows if w.window == "5m"), None)
        approx = "" if s.target_is_bucket_edge else "~"
        cells.append(f"{SLI_BY_KEY[s.sli].title} {approx}{_pct(w5.good_ratio if w5 else None)}"
                     f"{'!' if s.breaching else ''}")
    return ", ".join(cells) or "-"


def _gone(w: ClientGoneWindowStatus | None) -> str:
    """Requests whose client left first: the gateway's 499s and their share of its answers (smg 1.13), else
    SGLang's aborted requests."""
    if w is None:
        return "-"
    if w.gateway_client_closed is not None:
        share = w.gateway_client_closed_ratio
        return f"{w.gateway_client_closed:.0f}" + ("" if share is None else f" ({share * 100:.1f}%)")
    return "-" if w.server_aborted is None else f"{w.server_aborted:.0f} abort"


def _state(d: DeploymentStatus) -> tuple[str, str]:
    if any(not t.up and not t.placeholder and t.scrapes for t in d.targets if t.role in ENGINE_ROLES):
        return "DOWN", RED
    if any(s.breaching for s in d.slis) or (d.availability is not None and d.availability.breaching):
        return "BREACH", RED
    if d.tpot_leading is not None and d.tpot_leading.warning:
        # Running requests have decoded slower than the TPOT target for the alert's hold: TPOT follows. One
        # refresh over it (`over_target`, the `!` on TPOT now) is not a state: it comes and goes when healthy.
        return "SLOWING", YELLOW
    windows = [w for s in d.slis for w in s.windows] + (d.availability.windows if d.availability else [])
    fast = [w.burn_rate for w in windows if w.window in ("5m", "1h") and w.burn_rate is not None]
    if fast and max(fast) >= 1.0:
        return "BURNING", YELLOW
    if all(t.placeholder for t in d.targets) and d.targets:
        return "UNSET", DIM
    empty = [w.events is None and w.burn_rate is None for s in d.slis for w in s.windows]
    empty += [w.requests is None and w.burn_rate is None for w in (d.availability.windows if d.availability else [])]
    if empty and all(empty):
        return "NO DATA", DIM  # nothing measured yet (or any more): not an OK with burn 0.0x
    return "OK", GREEN


def render_table(status: StatusResponse, *, color: bool = True) -> str:
    head = ["deployment", "state", "TPOT tgt ms", "TPOT p99 5m", "TPOT SLI 5m", "burn 1h", "budget", "TPOT now ms",
            "TTFT tgt ms", "TTFT p99 5m", "TTFT SLI 5m", "other SLIs 5m", "goodput 5m", "avail 5m", "gone 5m", "run", "queue", "up"]
    rows = []
    for d in status.deployments:
        slis = {s.sli: s for s in d.slis}
        state, col = _state(d)
        load = d.load.get("all", {})
        ups = sum(1 for t in d.targets if t.up)
        tpot = _sli_cells(slis.get("tpot"))
        ttft = _sli_cells(slis.get("ttft"))
        gp5 = next((w for w in d.goodput if w.window == "5m"), None)
        lead = d.tpot_leading
        now_ms = "-" if lead is None or lead.seconds is None else f"{_ms(lead.seconds)}{'!' if lead.over_target else ''}"
        av5 = next((w for w in d.availability.windows if w.window == "5m"), None) if d.availability else None
        rows.append(([d.name, state, *tpot, now_ms, *ttft[:3], _other_slis(d.slis), _pct(gp5.ratio) if gp5 else "-",
                      _pct(av5.good_ratio) if av5 else "-",
                      _gone(next((w for w in d.client_gone if w.window == "5m"), None)),
                      f"{load.get('num_running_reqs', 0):.0f}", f"{load.get('num_queue_reqs', 0):.0f}",
                      f"{ups}/{len(d.targets)}"], col))
    widths = [max(len(h), *(len(r[0][i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    for cells, col in rows:
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths))
        out.append(f"{col}{line}{RESET}" if color else line)
    side = status.sidecar
    out.append(f"{DIM if color else ''}sidecar {side.version}: {side.cycles} cycles, last {side.last_cycle_seconds * 1000:.0f} ms, "
               f"interval {side.scrape_interval_seconds:g}s; ~ = target off bucket edges (interpolated); TPOT now = seconds "
               f"per token of the running requests (ITL, gen_throughput), ! over the target now, SLOWING once over it for the "
               f"warning's hold; gone = requests whose client left "
               f"before the end (gateway 499s, share of its answers; without smg 1.13, SGLang's aborts){RESET if color else ''}")
    notes = [f"  {d.name}: {s.sli} target {s.target_seconds * 1000:g} ms is not a bucket edge; launch with {s.fix_flag}"
             for d in status.deployments for s in d.slis if s.fix_flag]
    flags = [f"  {d.name} {t.id}: {w}" for d in status.deployments for t in d.targets for w in t.warnings]
    return "\n".join(out + _sidecar_notes(status, color) + notes[:5] + flags[:5])


def _sidecar_notes(status: StatusResponse, color: bool) -> list[str]:
    """What the sidecar says is wrong with itself (degraded, a refused reload), in red under the table."""
    side = status.sidecar
    lines = [f"sidecar degraded: {reason}" for reason in side.degraded]
    if side.config is not None and not side.config.successful:
        lines.append(f"sidecar config reload failed (the previous config still runs): {side.config.last_error}")
    return [f"{RED}{line}{RESET}" if color else line for line in lines]


MAX_PAGES = 1000  # a sidecar whose tokens never end (a bug) stops the client instead of looping


def _get_page(url: str, params: list[tuple[str, str]], token: str | None, timeout: float) -> StatusResponse:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    req = urllib.request.Request(url.rstrip("/") + "/api/v1/status" + query)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - user-given sidecar URL
        return StatusResponse.model_validate(json.loads(resp.read()))


TOKEN_ENV = "SLO_MONITOR_API_TOKEN"


def resolve_token(token: str | None, token_file: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token for /api/*: `--token`, else `--token-file`, else $SLO_MONITOR_API_TOKEN (a token on
    the command line is visible to every user of the machine in `ps`). Raises ValueError (one line) for
    a file that cannot be read or holds no token."""
    if token:
        return token
    if token_file:
        try:
            text = open(token_file, encoding="utf-8").read().strip()  # noqa: SIM115 - read whole, closed at once
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"--token-file {token_file}: cannot read it ({err.__class__.__name__}: "
                             f"{getattr(err, 'strerror', None) or err})") from None
        if not text:
            raise ValueError(f"--token-file {token_file}: the file is empty; it should hold the bearer token")
        return text
    env = os.environ if environ is None else environ
    return env.get(TOKEN_ENV, "").strip() or None


def fetch_status(url: str, token: str | None = None, timeout: float = 5.0, *,
                 deployments: Sequence[str] = (), states: Sequence[str] = ()) -> StatusResponse:
    """Every deployment the filters select, page after page (a large fleet's sidecar answers in pages);
    the answer has no `page`, as an unpaged one. A sidecar from before paging ignores the filters and
    answers everything at once."""
    filters = [("deployment", g) for g in deployments] + [("state", s) for s in states]
    first = _get_page(url, filters, token, timeout)
    pages = 1
    while first.page is not None and first.page.next_page_token is not None:
        if pages >= MAX_PAGES:
            raise RuntimeError(f"the sidecar at {url} answered {MAX_PAGES} pages and still gave a next page_token")
        nxt = _get_page(url, [*filters, ("limit", "1000"), ("page_token", first.page.next_page_token)], token, timeout)
        pages += 1
        first.deployments += nxt.deployments
        first.page = nxt.page
    first.page = None
    return first


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="live table of deployments vs SLO targets (reads a running sidecar)")
    p.add_argument("--url", default="http://127.0.0.1:9464", help="sidecar base URL")
    p.add_argument("--token", help=f"bearer token for /api/* (visible in `ps`: prefer --token-file or ${TOKEN_ENV})")
    p.add_argument("--token-file", metavar="PATH", help="read the bearer token from this file (surrounding "
                   "blanks and the final newline are ignored)")
    p.add_argument("--watch", type=float, default=0.0, metavar="SECONDS", help="refresh every N seconds")
    p.add_argument("--json", action="store_true", help="print the raw status JSON once")
    p.add_argument("--deployment", action="append", default=[], metavar="GLOB",
                   help="only deployments whose name matches (repeatable; globs such as 'kimi-*')")
    p.add_argument("--state", action="append", default=[], choices=["breaching", "down", "ok"],
                   help="only deployments in this state (repeatable)")
    p.add_argument("--no-color", action="store_true")
    p.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    token = resolve_token(args.token, args.token_file)
    while True:
        try:
            st = fetch_status(args.url, token, deployments=args.deployment, states=args.state)
        except (urllib.error.URLError, OSError) as err:
            if isinstance(err, urllib.error.HTTPError) and err.code == 400:
                # The sidecar says what is wrong with the query (e.g. a page token of another config).
                print(f"slo-monitor: the sidecar refused the query: {err.read().decode(errors='replace')}",
                      file=sys.stderr)
                return 2
            print(f"slo-monitor: cannot reach the sidecar at {args.url}: {err}", file=sys.stderr)
            if not args.watch:
                return 1
            time.sleep(args.watch)
            continue
        if args.json:
            print(st.model_dump_json(indent=2))
            return 0
        table = render_table(st, color=not args.no_color and sys.stdout.isatty())
        if args.watch:
            sys.stdout.write("\x1b[H\x1b[2J" + table + "\n")
            sys.stdout.flush()
            time.sleep(args.watch)
        else:
            print(table)
            return 0
