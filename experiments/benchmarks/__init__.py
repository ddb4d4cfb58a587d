"""Performance benchmarks: printed tables, never timed tests."""
