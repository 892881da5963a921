"""The wire contract every side shares: ``convert.py`` (the one place wire messages and core
values are converted), ``metadata.py`` (the trailing-metadata keys of errors) and ``tracing.py``
(W3C trace context and OpenTelemetry's set-up, optional).

May import: :mod:`waitgraph.statemachine`, :mod:`waitgraph.proto`. Nothing else of waitgraph.
"""
