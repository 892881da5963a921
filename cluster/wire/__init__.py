"""The wire contract every side shares: ``convert.py`` (the one place wire messages and core
values are converted) and ``metadata.py`` (the trailing-metadata keys of errors).

May import: :mod:`waitgraph.statemachine`, :mod:`waitgraph.proto`. Nothing else of waitgraph.
"""
