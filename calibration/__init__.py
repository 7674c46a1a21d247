"""Fitting a cluster's network and overhead parameters from captures, iperf3 and traces."""
