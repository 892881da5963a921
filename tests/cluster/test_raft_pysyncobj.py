"""The pysyncobj the Raft layer was checked against (cluster/node/raft/_pysyncobj.py, the checklist).

An override of a private pysyncobj name does not fail when pysyncobj renames it: it just stops being
called. These tests fail instead: on another pysyncobj version (re-check the checklist, then move the
pin), and on any private name the layer overrides that the installed pysyncobj does not have.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from pysyncobj import SyncObj
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.node.raft._transport import WaitgraphConnection, WaitgraphServer, WaitgraphTransport

from .fakes import follower

CHECKED_VERSION = "0.3.17"


def test_the_installed_pysyncobj_is_the_one_the_checklist_was_made_for() -> None:
    assert importlib.metadata.version("pysyncobj") == CHECKED_VERSION


def _overridden(cls: type, base: type) -> set[str]:
    """Names that the classes between ``cls`` and ``base`` define and ``base`` defines too, or should."""
    mangled = f"_{base.__name__}__"
    names: set[str] = set()
    for klass in cls.__mro__[: cls.__mro__.index(base)]:
        names |= {n for n in vars(klass) if n.startswith(mangled) or (n in dir(base) and not n.startswith("__"))}
    return names


def test_every_private_syncobj_name_the_layer_overrides_exists_in_pysyncobj(tmp_path: Path) -> None:
    names = _overridden(WaitgraphSyncObj, SyncObj)
    assert "_SyncObj__onMessageReceived" in names and "_onTick" in names  # the walk sees the mixins
    node = follower(tmp_path)
    try:
        # A method is on the class; the journal and the encryptor are instance attributes that
        # SyncObj.__init__ assigns (our set-only descriptors store them in the instance).
        missing = sorted(n for n in names if not hasattr(SyncObj, n) and n not in vars(node))
        assert missing == []
    finally:
        node._doDestroy()


def test_every_private_transport_name_the_layer_overrides_exists_in_pysyncobj() -> None:
    for ours, theirs in (
        (WaitgraphConnection, TcpConnection),
        (WaitgraphServer, TcpServer),
        (WaitgraphTransport, TCPTransport),
    ):
        names = {n for n in vars(ours) if n.startswith(f"_{theirs.__name__}__")}
        assert [n for n in sorted(names) if not hasattr(theirs, n)] == [], ours
