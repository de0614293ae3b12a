# The slo-monitor sidecar. Build: docker build -t sglang-slo-monitor:0.1.0 .
# Run (see docs/compose.md): mount a config at /etc/slo-monitor/config.yaml.
#
# Pinned to an exact Python release on a fixed Debian base so a rebuild gets the same interpreter.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed numeric UID/GID so Kubernetes `runAsNonRoot` can verify it and volumes can be chowned to it.
RUN groupadd --system --gid 10001 slo \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/slo-monitor --no-create-home \
       --shell /usr/sbin/nologin slo \
    && mkdir -p /etc/slo-monitor /var/lib/slo-monitor \
    && chown 10001:10001 /var/lib/slo-monitor

# Only what the package build needs, so edits to tests or docs do not invalidate this layer.
WORKDIR /tmp/build
COPY pyproject.toml README.md ./
COPY monitor ./monitor
RUN pip install . && rm -rf /tmp/build
WORKDIR /var/lib/slo-monitor

USER 10001:10001
EXPOSE 9464

# No curl/wget in the slim image; the interpreter is there anyway.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

# Inside a container 0.0.0.0 is right: the container's own network namespace is the boundary, and
# what is reachable from outside is decided by the port publishing (docker-compose.yml publishes
# on 127.0.0.1 only) or by the Kubernetes Service/NetworkPolicy, not by this bind address.
CMD ["slo-monitor", "run", "-c", "/etc/slo-monitor/config.yaml", "--listen", "0.0.0.0:9464"]
