"""Sloth as a peer (issue 25 item 6): `python -m tools.sloth_compare` writes docs/sloth-comparison.md."""
