"""The ``waitgraph`` console script: every verb, put together.

The operator verbs, ``serve`` and ``replay`` come from :mod:`waitgraph.ops.cli`, ``dev`` from
:mod:`waitgraph.dev.cli`, ``mcp`` from :mod:`waitgraph.mcp.cli`. This module is the one place where
the roles meet; it adds nothing else.
"""

from __future__ import annotations

from waitgraph.dev.cli import dev
from waitgraph.mcp.cli import mcp
from waitgraph.ops.cli import main

main.add_command(dev)
main.add_command(mcp)

__all__ = ["main"]

if __name__ == "__main__":
    main(prog_name="waitgraph")
