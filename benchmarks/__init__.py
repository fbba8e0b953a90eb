"""The benchmarks of dream-memory-actor, run as ``python -m benchmarks NAME [options] --json``.

Each benchmark is a module here with ``add_arguments(parser)`` and
``async run(args) -> dict``; ``__main__`` maps the names to the modules. Not part
of the installed package: run them from a checkout of the repository, with
``benchmarks/requirements.txt`` installed for the ones that need more than the
product's extras.
"""
