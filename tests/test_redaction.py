"""Redaction: what a URL or a header may not carry into an output, cut in one place."""

from __future__ import annotations

import logging

import pytest

from monitor.redaction import RedactingFormatter, redact


@pytest.mark.parametrize("text, expected", [
    ("http://user:s3cret@10.0.0.1:8000/metrics", "http://***@10.0.0.1:8000/metrics"),
    # The userinfo ends at the last `@` of the authority: a raw `@` in the password is cut whole.
    ("http://user:pa@SSSECRET3@host:8000/metrics", "http://***@host:8000/metrics"),
    ("down: http://u:a@b@c@h/x (refused)", "down: http://***@h/x (refused)"),
    ("server@http://a:b@h/x worker 10.0.0.1:8000", "server@http://***@h/x worker 10.0.0.1:8000"),
    ("http://h/metrics?token=abc&x=1", "http://h/metrics?token=***&x=1"),
    ("http://h/m?x=1&api_key=k1;access_token=t2&Password=p3#f", "http://h/m?x=1&api_key=***;access_token=***&Password=***#f"),
    ("http://h/m?X-Auth=a&client_secret=s&page=2", "http://h/m?X-Auth=***&client_secret=***&page=2"),
    ("b'Authorization: Bearer tok123\\x01' ^", "b'Authorization: Bearer ***\\x01' ^"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic ***"),
    ("proxy-authorization: opaque", "proxy-authorization: ***"),
    ("Invalid header token: b'Authorization Bearer tok123'", "Invalid header token: b'Authorization Bearer ***'"),
])
def test_secrets_are_cut_from_urls_and_headers(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected  # redacting twice changes nothing


@pytest.mark.parametrize("text", [
    "http://10.0.0.1:8000/metrics?page=2&format=text",
    "Cannot connect to host 10.0.0.1:8000 ssl:default [Connect call failed ('10.0.0.1', 8000)]",
    "server@http://10.0.0.1:8000/metrics",
    "npu@npu-smi info",
    "bearer_token is set",
])
def test_text_without_secrets_is_left_alone(text):
    assert redact(text) == text


def test_none_stays_none():
    assert redact(None) is None


def test_the_log_formatter_cuts_secrets_from_the_message_and_the_traceback():
    try:
        raise ValueError("GET http://u:p@ss@h/x?token=t0k failed")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "fetch %s", ("http://u:p@ss@h/m",), True)
        import sys

        record.exc_info = sys.exc_info()
    line = RedactingFormatter("%(message)s").format(record)
    assert "p@ss" not in line and "t0k" not in line and "ss@h" not in line
    assert "fetch http://***@h/m" in line and "http://***@h/x?token=***" in line
