#!/usr/bin/env bash
# The current Prometheus 3, Alertmanager, Sloth and VictoriaMetrics (single node, vmagent, vmalert), built from their pinned Go modules (the Go module proxy,
# the ordinary Go client) into the folder given (the Makefile passes .venv/go-bin). Test and demo components
# only: the project stays Python, nothing here is vendored or committed.
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
PROMETHEUS_MODULE=v0.316.0   # Prometheus 3.x (the module's v0.3xx.y is release 3.xx.y)
ALERTMANAGER_MODULE=v0.35.0
SLOTH_MODULE=v0.16.0
# v1.153.0 and newer need GOTOOLCHAIN=go1.27.3; v1.151.0 builds with the machine's Go (docs/scale-out.md).
VICTORIAMETRICS_MODULE=v1.151.0
export GOBIN="$out" GOFLAGS=-modcacherw GOTOOLCHAIN=local
# `go install` sets no version string; the binaries say theirs as a release build would (`--version`).
version_flag="-X github.com/prometheus/common/version.Version"
prometheus_release="3.${PROMETHEUS_MODULE#v0.3}"

go install -ldflags "$version_flag=$prometheus_release" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE"
# Sloth's release build stamps its version into internal/info.Version (its scripts/build/bin/build-raw.sh); a plain
# `go install` leaves it "dev".
go install -ldflags "-X github.com/slok/sloth/internal/info.Version=$SLOTH_MODULE" \
  "github.com/slok/sloth/cmd/sloth@$SLOTH_MODULE"

# VictoriaMetrics' release build stamps lib/buildinfo.Version as "<app>-<date>-<tag>"; `-version` prints it.
vm_buildinfo="-X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version"
for app in victoria-metrics vmagent vmalert; do
  go install -ldflags "$vm_buildinfo=$app-$VICTORIAMETRICS_MODULE" \
    "github.com/VictoriaMetrics/VictoriaMetrics/app/$app@$VICTORIAMETRICS_MODULE"
done

# Alertmanager embeds its web UI's built assets (ui/app/dist), which its module does not ship: build it from
# a writable copy of the module with placeholder pages there (the API and amtool do not use them).
src="$out/../go-src/alertmanager-$ALERTMANAGER_MODULE"
if [ ! -d "$src" ]; then
  dir=$(go mod download -json "github.com/prometheus/alertmanager@$ALERTMANAGER_MODULE" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$src.tmp" && mkdir -p "$(dirname "$src")" && cp -r "$dir" "$src.tmp" && chmod -R u+w "$src.tmp"
  for ui in elm mantine; do
    mkdir -p "$src.tmp/ui/app/dist/$ui"
    echo "<p>Alertmanager's web UI is not built here; its API is.</p>" > "$src.tmp/ui/app/dist/$ui/index.html"
  done
  mv "$src.tmp" "$src"
fi
(cd "$src" && for cmd in alertmanager amtool; do
  go build -ldflags "$version_flag=${ALERTMANAGER_MODULE#v}" -o "$out/$cmd" "./cmd/$cmd"; done)

"$out/prometheus" --version | head -1
"$out/alertmanager" --version | head -1
{ "$out/sloth" version 2>/dev/null || "$out/sloth" --version; } && echo
for app in victoria-metrics vmagent vmalert; do "$out/$app" -version; done
