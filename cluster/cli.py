"""The ``waitgraph`` command line."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="waitgraph")
def main() -> None:
    """waitgraph: find and break deadlocks and livelocks between AI agents."""


if __name__ == "__main__":
    main()
