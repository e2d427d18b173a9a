"""Flotilla's benchmark harness: ``python3 -m uv run python -m bench`` (see docs/performance.md)."""
