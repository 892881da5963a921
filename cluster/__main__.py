"""``python -m waitgraph`` is the ``waitgraph`` command."""

from waitgraph.cli import main

main(prog_name="waitgraph")
