"""Benchmarks behind ``dream-memory bench``: each module has ``add_arguments`` and ``run``."""
