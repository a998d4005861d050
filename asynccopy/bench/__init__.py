"""Benchmarks: the timing harness, the tile-stream sweep, and reporters (table, JSON, CSV)."""
