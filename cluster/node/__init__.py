"""One cluster node: ``waitgraph serve``.

Raft (pysyncobj wrapped, behind a narrow face: the ``raft`` package), the gRPC services
(``server.py``, ``service.py``, ``auth.py``, ``ratelimit.py``, ``grpc_status.py``), the leader loops
(``loops.py``), the event journal (``events.py``), the logical clock (``clock.py``), the garbage
collector's policy (``collector.py``), settings (``config.py``), and what the node emits for
operators: Prometheus metrics (``metrics.py``) and JSON logs (``logs.py``).

May import: :mod:`waitgraph.statemachine`, :mod:`waitgraph.proto`, :mod:`waitgraph.wire`.
Never the SDK, the operators' tools or the dev tools: a web view is handed in by the caller
(``NodeProcess(http_view=...)``).
"""
