"""``waitgraph mcp``: an MCP server through which any MCP client coordinates with waitgraph
(the optional extra ``waitgraph[mcp]``; docs/mcp.md).

Each MCP session is one agent with one waitgraph session for as long as the MCP session lasts.
It is a client of the cluster through the SDK (:mod:`waitgraph.sdk`), never a gRPC client of its
own. ``server.py`` holds the tools and resources, ``agent.py`` the per-session agent (tasks,
leases, waits, rollbacks), ``run.py`` the stdio and streamable-HTTP transports, ``cli.py`` the
command.

May import: :mod:`waitgraph.sdk` and the root names, and the ``mcp`` package. Nothing here is
imported by the SDK or the nodes.
"""
