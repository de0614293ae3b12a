"""SGLang deployment emulator: real-format /metrics, latency model, incidents, request logs, router helper."""

from monitor.emulate.engine import EmulatedDeployment
from monitor.emulate.incidents import KINDS as INCIDENT_KINDS
from monitor.emulate.incidents import Incident, parse_spec
from monitor.emulate.server import Emulator, run_emulator
from monitor.emulate.topology import Layout, find_free_base_port, find_free_port, localize, plan

__all__ = [
    "INCIDENT_KINDS",
    "EmulatedDeployment",
    "Emulator",
    "Incident",
    "Layout",
    "find_free_base_port",
    "find_free_port",
    "localize",
    "parse_spec",
    "plan",
    "run_emulator",
]
