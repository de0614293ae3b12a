"""One loader for every config file a command accepts: the sidecar's own YAML/JSON, or OpenSLO documents."""

from __future__ import annotations

from pathlib import Path

from monitor.config import Config, is_openslo, parse_config, read_documents
from monitor.interop.openslo import config_from_openslo


def load_config(path: str | Path) -> Config:
    """The config in `path`; OpenSLO `SLO` documents become deployments (monitor.interop.openslo)."""
    docs = read_documents(path)
    if is_openslo(docs):
        return config_from_openslo(docs, str(path))
    return parse_config(docs[0] if docs else {}, str(path))
