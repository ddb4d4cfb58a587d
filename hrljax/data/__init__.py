"""Offline datasets: generation, storage and jittable goal / subgoal samplers."""
