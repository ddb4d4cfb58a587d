"""Experiment entry points (absl), configs, benchmarks and notebooks."""
