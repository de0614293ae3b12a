"""The one place secrets are cut out of text before it reaches an output (status, /metrics labels, logs,
the recording).

Three shapes carry a secret in what the sidecar prints: the userinfo of a URL (`user:password@host`),
a query parameter whose name says it is a credential (`?token=...`, `&api_key=...`), and an HTTP
`Authorization` header quoted back in a parse error. The userinfo ends at the *last* `@` of the
authority (RFC 3986: the host cannot hold one), so a password typed with a raw `@` is cut whole.
"""

from __future__ import annotations

import logging
import re

MASK = "***"

# scheme://[userinfo@]host...: the authority runs to the first `/`, `?`, `#` or blank; greedy, so the
# match ends at its last `@`.
_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")
# A query (or fragment-style) parameter named like a credential: any name containing one of these words.
SECRET_PARAM_WORDS = ("token", "key", "password", "passwd", "pwd", "secret", "auth", "credential",
                      "signature", "sig", "session", "cookie")
_SECRET_NAME = re.compile("|".join(SECRET_PARAM_WORDS), re.IGNORECASE)
_SECRET_PARAM = re.compile(
    r"(?P<lead>[?&;#](?P<name>[^=&;#\s/?]*(?:" + "|".join(SECRET_PARAM_WORDS) + r")[^=&;#\s/?]*)=)"
    r"(?P<value>[^&;#\s'\"]*)", re.IGNORECASE)
# `Authorization: Bearer abc`, `Proxy-Authorization: Basic ...`, also as a Python repr ('Authorization', '...').
_AUTH_HEADER = re.compile(
    r"(?P<lead>(?:proxy-)?authorization['\"]?\s*[:=,]\s*['\"]?)(?:(?P<scheme>[A-Za-z][\w-]*)\s+)?"
    r"(?P<value>[^\s'\",;\\]+)", re.IGNORECASE)
_BEARER = re.compile(r"(?P<lead>\bbearer\s+)(?P<value>[^\s'\",;\\]+)", re.IGNORECASE)


def secret_param(name: str) -> bool:
    """Whether a query parameter's name says it carries a credential (`redact` cuts its value)."""
    return bool(_SECRET_NAME.search(name))


def _auth(m: re.Match[str]) -> str:
    scheme = m.group("scheme")
    return f"{m.group('lead')}{scheme + ' ' if scheme else ''}{MASK}"


def redact(text: str | None) -> str | None:
    """`text` with URL userinfo, credential-named query parameters and Authorization header values
    replaced by `***` (None stays None)."""
    if text is None:
        return None
    if "@" in text:
        text = _USERINFO.sub(MASK + "@", text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: m.group("lead") + MASK, text)
    lowered = text.lower()
    if "authorization" in lowered:
        text = _AUTH_HEADER.sub(_auth, text)
    if "bearer" in lowered:
        text = _BEARER.sub(lambda m: m.group("lead") + MASK, text)  # idempotent: *** stays ***
    return text


def redact_str(text: str) -> str:
    """`redact` for text that is never None (keys, labels)."""
    out = redact(text)
    assert out is not None
    return out


class RedactingFormatter(logging.Formatter):
    """A log formatter that passes each whole line (message, arguments, traceback) through `redact`:
    a URL or header that reaches a log line from any library is cut too."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_str(super().format(record))
