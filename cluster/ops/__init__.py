"""The operators' tools: the CLI verbs (``cli.py``), tables, narratives and pictures
(``render.py``), ``--wait`` progress (``progress.py``), and the live web view (``liveview.py``
with ``static/``), which a node serves when ``waitgraph serve`` hands it in. They talk to a
cluster through the SDK's operator client (:class:`waitgraph.sdk.SyncOperatorClient`).

May import: :mod:`waitgraph.sdk`, :mod:`waitgraph.node`, :mod:`waitgraph.wire`,
:mod:`waitgraph.statemachine`, :mod:`waitgraph.proto`. Never the dev tools.
"""
