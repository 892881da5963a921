"""Chaos tests: real node processes in network namespaces, nemeses, a workload and its checkers."""
