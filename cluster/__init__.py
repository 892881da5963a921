"""waitgraph's I/O shell: the node process, its services and the operator CLI."""
