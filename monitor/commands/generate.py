"""`slo-monitor generate`: rules, promtool tests, Prometheus/Alertmanager config, Kubernetes, dashboards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from monitor.generate.build import generate
from monitor.generate.options import HISTOGRAM_MODES, Options, webhook_defaults
from monitor.generate.writer import check, write
from monitor.interop.load import load_config

DEFAULT_CONFIG = "examples/kimi-k2.6-ascend.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="write alerts/, dashboards/ and deploy/kubernetes/ from a config",
                              description=__doc__)
    p.add_argument("-c", "--config", default=DEFAULT_CONFIG, help=f"deployment config (default {DEFAULT_CONFIG})")
    p.add_argument("--out", default=".", help="directory to write into (default: current directory)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 listing every file that differs from the generated one")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="N",
                   help="divide every window, `for`, scrape/eval interval and Alertmanager timer by N "
                        "(end-to-end tests; record names keep the nominal window)")
    p.add_argument("--approximate", action="store_true",
                   help="allow SLI targets that are not bucket edges (interpolated, marked in annotations)")
    p.add_argument("--histograms", choices=HISTOGRAM_MODES, default="classic",
                   help="classic (default): rules and dashboards read the _bucket/_sum/_count series; nhcb: "
                        "Prometheus 3 converts SGLang's histograms at scrape time (convert_classic_histograms_to_nhcb, "
                        "set in the generated scrape config) and rules/dashboards read the native histograms "
                        "(histogram_fraction, histogram_count, histogram_sum)")
    page, ticket = webhook_defaults()
    p.add_argument("--page-webhook-url", default=page, help="Alertmanager page receiver (env SLO_MONITOR_PAGE_WEBHOOK_URL)")
    p.add_argument("--ticket-webhook-url", default=ticket,
                   help="Alertmanager ticket receiver (env SLO_MONITOR_TICKET_WEBHOOK_URL)")
    p.add_argument("--alertmanager", default="127.0.0.1:9093", help="host:port Prometheus sends alerts to")
    p.add_argument("--namespace", default="monitoring", help="namespace of the Kubernetes manifests")
    p.add_argument("--format", choices=("prometheus", "openslo", "sloth"), default="prometheus",
                   help="prometheus (default): everything above; openslo: OpenSLO v1 SLO documents under "
                        "openslo/; sloth: Sloth prometheus/v1 specs under sloth/")
    p.set_defaults(func=run)


def options_from(args: argparse.Namespace) -> Options:
    return Options(time_scale=args.time_scale, approximate=args.approximate, page_webhook_url=args.page_webhook_url,
                   ticket_webhook_url=args.ticket_webhook_url, alertmanager=args.alertmanager,
                   namespace=args.namespace, config_name=Path(args.config).as_posix(),
                   histograms=args.histograms)


def _interop(config, fmt: str) -> dict[str, str]:
    if fmt == "openslo":
        from monitor.interop.openslo import render_openslo

        return render_openslo(config)
    from monitor.interop.sloth import render_sloth

    return render_sloth(config)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    out = Path(args.out)
    if args.format != "prometheus" and args.histograms != "classic":
        print(f"slo-monitor generate: --histograms {args.histograms} applies to --format prometheus only "
              "(OpenSLO and Sloth specs are written over the classic series)", file=sys.stderr)
        return 2
    if args.format != "prometheus":
        # Interop specs are for other tools' repos: written where asked, not part of --check's tree.
        files = _interop(config, args.format)
        for rel, text in sorted(files.items()):
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"  {path}")
        print(f"slo-monitor generate --format {args.format}: {len(files)} files under {out}")
        return 0
    files = generate(config, options_from(args))
    if args.check:
        problems = check(files, out)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"slo-monitor generate --check: {len(problems)} file(s) out of date; run `slo-monitor generate "
                  f"-c {args.config}`", file=sys.stderr)
            return 1
        print(f"slo-monitor generate --check: {len(files)} files up to date")
        return 0
    changed = write(files, out)
    print(f"slo-monitor generate: {len(files)} files, {len(changed)} written/removed under {out}")
    for rel in changed:
        print(f"  {rel}")
    return 0
