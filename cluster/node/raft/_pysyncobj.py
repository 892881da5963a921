"""The fence around pysyncobj 0.3.17: the one module that imports it, and the checklist of what we use.

pysyncobj has no type hints: everything imported here is ``Any`` to mypy (``pyproject.toml``,
``ignore_missing_imports``), and our classes that subclass its classes say so at the class line
(``# type: ignore[misc]``); every module of ours is still checked with ``mypy --strict``. Nothing outside
``waitgraph.node.raft`` imports pysyncobj or touches one of its objects (``scripts/check_layers.py``);
inside, every module imports it from here.

**What we assume, and what to re-check on an upgrade** (read the new ``pysyncobj/*.py`` against each
line; a renamed or re-signed private name does not fail loudly, the override just stops being called):

Private names of ``SyncObj`` (``syncobj.py``). Python looks up ``self.__x`` inside ``SyncObj`` as
``self._SyncObj__x``, so a class attribute of that name in our MRO replaces it everywhere; each is
overridden in one module only (``_syncobj.py`` assembles them).

=====================================  ==============  =======================================================
name                                   where           what it assumes
=====================================  ==============  =======================================================
``__raftLog`` (set-only descriptor)    _acks           assigned exactly once, in ``__init__``, from
                                                       ``createJournal(None)`` = a ``MemoryJournal``, before
                                                       the term, vote and log are read from it
``__encryptor`` (set-only descriptor)  _transport      assigned once in ``__init__`` (``getEncryptor`` when
                                                       ``password`` is set, else None); the transport hands
                                                       ``syncObj.encryptor`` to every connection
``__sendNextNodeIdx`` (override)       _acks           signature ``(node, reset=False, nextNodeIdx=None,
                                                       success=False)``; sends one ``next_node_idx`` message
``_checkCommandsToApply`` (override)   _acks           the leader appends and sends a tick's entries here,
                                                       after the commit loop of ``_onTick``
``__onBecomeLeader`` (override)        _acks           appends the no-op of the term (sets ``__noopIDx``)
``__onMessageReceived`` (override)     _syncobj        the transport's message handler, registered in
                                                       ``__init__``; ``append_entries`` (``prevLogIdx``,
                                                       ``prevLogTerm``, ``entries`` as ``(cmd, idx, term)``,
                                                       ``transmission``) and ``next_node_idx`` (``success``,
                                                       ``reset``) message shapes, read by _guard
``__doApplyCommand`` (override)        _apply          unpickles an entry (``(funcID, args)``) and calls the
                                                       method; raises on bad bytes; ``__applyLogEntries``
                                                       catches only ``SyncObjExceptionWrongVer``
``__tryLogCompaction`` (override)      _compaction     called once per tick; reads ``logCompactionMinEntries``,
                                                       ``logCompactionMinTime``, ``logCompactionSplit`` from
                                                       the conf on each call; ``__forceLogCompaction``
``__parseChangeClusterRequest``        _membership     called on every entry appended or applied; returns
(override)                                             None for a non-membership entry; an exception escapes
                                                       ``_onTick``
``__changeCluster`` (override)         _membership     the leader's check before appending a change; its
                                                       ``__changeClusterIDx`` test never refuses (never set)
``__doChangeCluster`` (override)       _membership     applies a change at append (and undoes it with
                                                       ``reverse``); request ``[kind, id, node, ...]``, builds
                                                       the node from an address string; False for its leader
``__updateClusterConfiguration``       _membership     called when a dump is loaded, with its membership
(override)
``__raftElectionDeadline`` (written)   _liveness       compared with ``monotonicTime()`` at the start of
                                                       ``_onTick``; ``__generateRaftTimeout()``
``__connectedToAnyone``, ``__selfNode``  _liveness     a node stands only when connected to someone
``__otherNodes``, ``__transport``      _liveness       ``transport.send(node, message)``; a message type
                                                       with no handler is ignored by the receiver (keepalive)
``__lastResponseTime``                 _liveness       node -> ``monotonicTime()`` of its last answer; kept
                                                       for removed members too
``__raftNextIndex`` (written)          _guard          node -> next index; the ``next_node_idx`` handler
                                                       moves it back on an older success reply
``__raftCommitIndex``, ``__noopIDx``   _membership     read on the tick thread
``__conf``                             several         the ``SyncObjConf`` instance we built (fields above)
``__getCurrentLogIndex``               _acks           index of the last log entry
``__pipeNotifier``                     _syncobj        ``notify()`` wakes the tick thread's poll
``__transport`` (``refusals``),        _node           read for status and for the probe of a new member
``__encryptor``
``_poller``                            _liveness       ``poll(0)`` reads what is waiting without blocking
``_onTick`` (override)                 _syncobj        one tick: election check first, reads (``poll``) last
=====================================  ==============  =======================================================

Public but internal ``SyncObj`` members (no underscore pair, still not a documented API): ``_isLeader``,
``_getLeader`` (everywhere), ``_applyCommand(command, callback, _COMMAND_TYPE.MEMBERSHIP)``
(_membership), ``raftCurrentTerm``, ``raftLastApplied``, ``raftCommitIndex``, ``selfNode``,
``otherNodes``, ``hasQuorum``, ``isNodeConnected``, ``getStatus()`` (keys ``state``, ``leader``,
``raft_term``, ``commit_idx``, ``last_applied``, ``log_len``), ``forceLogCompaction``,
``destroy_synchronous`` (_node). ``addNodeToCluster`` / ``removeNodeFromCluster`` are overridden to
refuse (_membership; ``syncobj_admin``'s ``add``/``remove`` call them).

The replicated method (_apply): ``@replicated`` registers ``apply_commands`` and a copy named
``apply_commands_v0`` in the class body; ``SyncObj.__init__`` enumerates ``dir(self)`` (calling ``getattr``
on every name: no properties) and numbers the replicated methods by sorted (version, name): there must
stay exactly one, or the numbers in the log change meaning. ``apply_commands(payload, callback=)``
pickles ``(funcID, (payload,))`` with ``_COMMAND_TYPE.REGULAR``; the callback gets ``(result,
FAIL_REASON)`` on the tick thread.

Configuration (_config, _compaction): ``SyncObjConf`` fields ``password``, ``journalFile`` (None: a
``MemoryJournal``), ``fullDumpFile``, ``bindAddress``, ``appendEntriesUseBatch``, ``appendEntriesPeriod``,
``appendEntriesBatchSizeBytes``, ``raftMinTimeout``, ``raftMaxTimeout``, ``leaderFallbackTimeout``,
``connectionTimeout`` (>= ``raftMaxTimeout``), ``connectionRetryTime``, ``commandsQueueSize``,
``commandsWaitLeader``, ``dynamicMembershipChange``, ``logCompactionMinEntries``,
``logCompactionMinTime``, ``logCompactionSplit``, ``onReady``, ``onStateChanged``, and the dump hooks
``serializer(fileName, (last, prev, cluster))`` / ``deserializer(fileName) -> (last, prev, cluster)`` /
``serializeChecker() -> SERIALIZER_STATE`` (a custom serializer turns off pysyncobj's own fork).

The journal (_journal): the ``Journal`` interface (``add``, ``clear``, ``deleteEntriesFrom``,
``deleteEntriesTo``, ``__getitem__``, ``__len__``, ``_destroy``, ``setRaftCommitIndex``,
``getRaftCommitIndex``, ``setCurrentTerm``, ``getCurrentTerm``, ``getVotedForNodeId``,
``onOneSecondTimer``); ``MetaStorer`` (``getMeta``/``storeMeta``); ``FileJournal`` (the previous
release's format, read once to migrate).

The transport (_transport): ``TCPTransport`` (``addNode``, ``_createServer``, ``_server``,
``_connections``, ``_unknownConnections``, ``_onNewIncomingConnection``, ``_onTick``, ``destroy``,
``_syncObj``); ``TcpServer`` (``bind``, ``__onNewConnection``, ``__socket``, ``__poller``, ``__fileno``,
``__sendBufferSize``, ``__recvBufferSize``, ``__connectionTimeout``, ``__keepalive``,
``__onNewConnectionCallback``); ``TcpConnection`` (``send``, ``connect``, ``disconnect``, ``state``,
``encryptor``, ``sendRandKey``, ``recvRandKey``, ``__tryReadBuffer`` and ``__processParseMessage``
(overridden), ``__socket``, ``__writeBuffer``, ``__trySendBuffer``, ``__lastReadTime``);
``CONNECTION_STATE``; ``encryptor.SALT`` (the PBKDF2 salt); ``monotonic.monotonic``.

The unpickler (_unpickler): every unpickling site calls ``pysyncobj.pickle.loads``/``load`` looked up at
call time, except ``pysyncobj.journal``, which imported ``loads`` by name: all three are replaced.
"""

from __future__ import annotations

import pysyncobj.journal as pysyncobj_journal
import pysyncobj.pickle as pysyncobj_pickle
import pysyncobj.syncobj as pysyncobj_syncobj
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON, SERIALIZER_STATE
from pysyncobj.encryptor import SALT as PYSYNCOBJ_SALT
from pysyncobj.journal import FileJournal, Journal, MemoryJournal, MetaStorer
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _COMMAND_TYPE as COMMAND_TYPE
from pysyncobj.syncobj import SyncObjExceptionWrongVer
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

__all__ = [
    "COMMAND_TYPE",
    "CONNECTION_STATE",
    "FAIL_REASON",
    "PYSYNCOBJ_SALT",
    "SERIALIZER_STATE",
    "FileJournal",
    "Journal",
    "MemoryJournal",
    "MetaStorer",
    "SyncObj",
    "SyncObjConf",
    "SyncObjExceptionWrongVer",
    "TCPTransport",
    "TcpConnection",
    "TcpServer",
    "monotonic_time",
    "pysyncobj_journal",
    "pysyncobj_pickle",
    "pysyncobj_syncobj",
    "replicated",
]
