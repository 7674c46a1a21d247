"""Throughput prediction: the trace-generation simulator and the coarse analytical baselines."""
