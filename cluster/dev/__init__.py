"""Local development: a cluster of real node processes on loopback (``localcluster.py``, behind
``waitgraph dev``, ``cli.py``), the seeds' scenarios end to end (``demo.py``, ``scripts/demo``),
and the staged picture of the live view (``showcase.py``, ``scripts/screenshot``).

May import every other role; nothing but :mod:`waitgraph.cli` imports it.
"""
