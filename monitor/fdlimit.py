"""The process's open-files limit (RLIMIT_NOFILE): raised at start, and the connection cap derived from it.

Every connection to the sidecar's port is a file descriptor. Under the usual soft limit of 1024, ~1,100
idle connections exhausted them: accept failed, /healthz waited seconds, asyncio logged a traceback per
failed accept. The soft limit may be raised up to the hard one without privileges, so it is at start
(bounded by `sidecar.open_files_limit`), and the port's connections are capped below what is left.
"""

from __future__ import annotations

import logging

try:
    import resource
except ImportError:  # not POSIX: nothing to raise, no limit known
    resource = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# What the sidecar holds besides its port's connections: scrape connections (sidecar.max_concurrent_scrapes
# on top of this), parse workers' pipes, the recording, request logs, telemetry commands, its log files.
RESERVED_FILES = 64
# asyncio accepts up to its backlog (100) of connections in one go before the first of them is shed.
ACCEPT_BURST = 100
MIN_CONNECTIONS = 16
MAX_DEFAULT_CONNECTIONS = 4096


def _finite(value: int) -> int | None:
    return None if resource is None or value == resource.RLIM_INFINITY or value < 0 else value


def open_files_limits() -> tuple[int | None, int | None]:
    """(soft, hard) RLIMIT_NOFILE; None for unlimited or unknown."""
    if resource is None:
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _finite(soft), _finite(hard)


def raise_open_files_limit(wanted: int) -> int | None:
    """Raise the soft open-files limit to `wanted`, or to the hard limit when that is lower; never lower it
    (0: leave it). Returns the soft limit in force afterwards (None: unlimited or unknown)."""
    soft, hard = open_files_limits()
    if resource is None or wanted <= 0 or soft is None or soft >= wanted:
        return soft
    target = wanted if hard is None else min(wanted, hard)
    if target <= soft:
        log.debug("open-files limit %d is already at the hard limit", soft)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, resource.RLIM_INFINITY if hard is None else hard))
    except (ValueError, OSError) as err:  # a sandbox may refuse even a raise within the hard limit
        log.warning("could not raise the open-files limit from %d to %d (%s); the port's connections are capped "
                    "below %d", soft, target, err, soft)
        return soft
    log.info("raised the open-files limit from %d to %d (hard limit %s; sidecar.open_files_limit %d)",
             soft, target, "unlimited" if hard is None else hard, wanted)
    return target


def default_max_connections(soft: int | None, scrape_connections: int) -> int:
    """The port's connection cap when `sidecar.max_connections` is not set: half of the descriptors the
    scrapes, the rest of the process and one accept burst leave, between 16 and 4096."""
    if soft is None:
        return MAX_DEFAULT_CONNECTIONS
    spare = soft - RESERVED_FILES - scrape_connections - ACCEPT_BURST
    return max(MIN_CONNECTIONS, min(MAX_DEFAULT_CONNECTIONS, spare // 2))
