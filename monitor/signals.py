"""Stop long-running commands (sidecar, emulator, demo) cleanly on SIGINT and SIGTERM; reload on SIGHUP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable


def on_stop_signals(callback: Callable[[], object]) -> None:
    """Call `callback` on SIGINT/SIGTERM from the running event loop (where the platform allows it)."""
    on_stop_signals_named(lambda _name: callback())


def on_stop_signals_named(callback: Callable[[str], object]) -> None:
    """`on_stop_signals` with the signal's name (e.g. "SIGTERM") given to `callback`, for the log."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on every platform / loop
            loop.add_signal_handler(sig, callback, sig.name)


def on_reload_signal(callback: Callable[[], object]) -> None:
    """Call `callback` on SIGHUP, which would otherwise end the process silently (exit 129):
    Prometheus-style daemons reload their config on it."""
    sighup = getattr(signal, "SIGHUP", None)
    if sighup is None:  # Windows
        return
    with contextlib.suppress(NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(sighup, callback)
