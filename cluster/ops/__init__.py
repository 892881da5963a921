"""The operators' tools: the CLI verbs (``cli.py``), the operator gRPC client (``opsclient.py``),
tables, narratives and pictures (``render.py``), ``--wait`` progress (``progress.py``), and the
live web view (``liveview.py`` with ``static/``), which a node serves when ``waitgraph serve``
hands it in.

May import: :mod:`waitgraph.node`, :mod:`waitgraph.wire`, :mod:`waitgraph.statemachine`,
:mod:`waitgraph.proto`. Never the dev tools or the SDK.
"""
