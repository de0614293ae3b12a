"""Capture the real gateways' expositions for tests/fixtures/gateway (run by hand; see capture.py)."""
