"""A restricted unpickler for everything pysyncobj unpickles (defence in depth behind ``password``).

pysyncobj 0.3.17 pickles its Raft messages and its log entries. Three places unpickle data:

- ``pysyncobj.tcp_connection.TcpConnection._TcpConnection__processParseMessage``: every network
  message, ``pickle.loads(zlib.decompress(data))`` after the decryption when a password is set
  (``_transport.py``; without the password the first frame already fails to decrypt and the
  peer is dropped);
- ``pysyncobj.syncobj.SyncObj._SyncObj__doApplyCommand`` / ``__parseChangeClusterRequest`` and the
  ``transmission == 'finish'`` branch of ``__onMessageReceived``: log entries, ``pickle.loads``;
- ``pysyncobj.journal.MetaStorer.getMeta``: the journal's ``.meta`` file (term, vote, commit
  index), through a ``loads`` that ``journal.py`` imported by name.
- (``pysyncobj.serializer.Serializer.deserialize`` unpickles the default full dump; we never use
  it: ``_compaction.py`` installs its own msgpack dump.)

All of them call ``pysyncobj.pickle.loads`` / ``load`` (the module attribute, looked up at call time)
except ``journal.py``, which holds its own reference. :func:`install` replaces all three with
:func:`restricted_loads` / :func:`restricted_load`. pysyncobj's own ``loads`` falls back to the
pure-Python unpickler on *any* error; ours has no fallback.

What pysyncobj's own messages contain (logged with :data:`SEEN` during a real 3-node run with
``--log-pickle-classes``, see ``tests/cluster/test_raft_security.py``): dicts, lists, tuples,
str, int, float, bool, None, and bytes. Pickle protocol 2 (pysyncobj's, still used for log
entries; our peers send messages in protocol 5, ``_transport.py``, which needs no global)
writes a non-empty ``bytes`` as ``_codecs.encode(<latin-1 str>, 'latin1')`` and an empty one as
``bytes()``: those are the only two globals a pysyncobj peer ever needs. ``_codecs.encode`` is not
handed out as is: the allowed callable only accepts ``(str, 'latin1')``. Every other global (``os.system``,
``builtins.eval``, ``pysyncobj.node.TCPNode``, which pysyncobj's own membership entries pickle) is
refused with :class:`pickle.UnpicklingError`; the connection is dropped by pysyncobj's own error
handling, and the refusal is counted in :data:`REFUSED`. Membership changes need no global: their
entries carry addresses and ids as strings (``_membership.py``), and a
membership entry that does not decode is skipped as a no-op there.

pysyncobj names: the module attributes ``pysyncobj.pickle.loads``, ``pysyncobj.pickle.load`` and
``pysyncobj.journal.loads`` (replaced). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import io
import logging
import pickle
import threading
from collections import Counter
from typing import Any

from waitgraph.node.raft._pysyncobj import pysyncobj_journal, pysyncobj_pickle

logger = logging.getLogger("waitgraph.node.safe_pickle")


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """The only use pysyncobj makes of ``_codecs.encode``: protocol-2 bytes."""
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only as (str, 'latin1')")
    return text.encode("latin1")


def _empty_bytes(*args: Any) -> bytes:
    if args:
        raise pickle.UnpicklingError("bytes() is allowed only without arguments")
    return b""


ALLOWED: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _latin1_bytes,
    ("codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}
"""(module, name) -> the object the unpickler gets instead. Nothing else resolves."""

REFUSED: Counter[str] = Counter()
"""``module.name`` -> how many times a pickle asked for it and was refused."""

SEEN: Counter[str] = Counter()
"""``module.name`` -> how many times it was asked for; filled only while :data:`record_seen` is set."""

record_seen = False
_lock = threading.Lock()


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` resolves only :data:`ALLOWED`."""

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}.{name}"
        if record_seen:
            with _lock:
                SEEN[key] += 1
        allowed = ALLOWED.get((module, name))
        if allowed is None:
            with _lock:
                REFUSED[key] += 1
            logger.warning("refused to unpickle global %s", key)
            raise pickle.UnpicklingError(f"global {key} is not allowed in a Raft message")
        return allowed


def restricted_loads(data: bytes | str) -> Any:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return RestrictedUnpickler(io.BytesIO(data)).load()


def restricted_load(file: Any) -> Any:
    return RestrictedUnpickler(file).load()


_installed = False


def install() -> None:
    """Point every unpickling site of pysyncobj at the restricted unpickler (idempotent).

    A documented monkeypatch, done once when ``waitgraph.node.raft`` is imported, before any SyncObj is
    built. ``tests/cluster/test_raft_security.py`` checks that it is in place.
    """
    global _installed
    pysyncobj_pickle.loads = restricted_loads
    pysyncobj_pickle.load = restricted_load
    pysyncobj_journal.loads = restricted_loads  # bound by name at import in journal.py
    _installed = True


def installed() -> bool:
    return (
        _installed
        and pysyncobj_pickle.loads is restricted_loads
        and pysyncobj_pickle.load is restricted_load
        and pysyncobj_journal.loads is restricted_loads
    )
