"""The fence around pysyncobj 0.3.17: the one module that imports it, and the checklist of what we use.

pysyncobj has no type hints: everything imported here is ``Any`` to mypy (``pyproject.toml``,
``ignore_missing_imports``), and our classes that subclass its classes say so at the class line
(``# type: ignore[misc]``); every module of ours is still checked with ``mypy --strict``. Nothing outside
``waitgraph.node.raft`` imports pysyncobj or touches one of its objects (``scripts/check_layers.py``);
inside, every module imports it from here.

**What we assume, and what to re-check on an upgrade** (read the new ``pysyncobj/*.py`` against each
line; a renamed or re-signed private name does not fail loudly, the override just stops being called):

Python looks up ``self.__x`` inside ``SyncObj`` as ``self._SyncObj__x``, so a class attribute of that
name anywhere in our MRO replaces the original everywhere (``_syncobj.py`` assembles the mixins); each
such name is overridden in one module only, and each override calls the original through ``super()``.

``_syncobj.py``
  - ``_onTick(timeToWait)`` (overridden): one tick checks the election deadline first and reads the
    sockets (``self._poller.poll``) last; the leader's commit loop counts its own copy as ``count = 1``.
  - ``__onMessageReceived(node, message)`` (overridden): the handler ``__init__`` registers with the
    transport, before the tick thread starts.
  - ``__pipeNotifier.notify()`` wakes the tick thread's poll.
  - ``SyncObjConf.serializer``, ``deserializer``, ``serializeChecker`` are set before ``__init__``.
  - ``SyncObj.__init__(selfNode, otherNodes, conf, transportClass=)`` starts the tick thread
    (``autoTick``), so every attribute of ours is set before it; it also enumerates ``dir(self)``,
    calling ``getattr`` on every name (no mixin may define a property), to number the replicated
    methods.
``_apply.py``
  - ``@replicated`` registers ``apply_commands`` and a copy ``apply_commands_v0`` in the class body;
    replicated methods are numbered by sorted (version, name) and the log stores the number: there must
    stay exactly one. ``apply_commands(payload, callback=)`` pickles ``(funcID, (payload,))`` as a
    ``_COMMAND_TYPE.REGULAR`` entry; ``callback(result, FAIL_REASON)`` runs on the tick thread.
  - ``__doApplyCommand(command)`` (overridden): unpickles an entry and calls the method; raises on bad
    bytes. ``__applyLogEntries`` catches only ``SyncObjExceptionWrongVer`` (let through as is): anything
    else escapes ``_onTick`` and the entry is applied again on every tick.
``_acks.py``
  - ``__raftLog`` (a set-only descriptor): assigned exactly once, in ``__init__``, from
    ``createJournal(journalFile=None)``, a ``MemoryJournal``, before the term, the vote and the log are
    read from it.
  - ``__sendNextNodeIdx(node, reset=False, nextNodeIdx=None, success=False)`` (overridden): sends one
    ``next_node_idx`` message; a follower calls it for every ``append_entries``, entry-less ones too.
  - ``_checkCommandsToApply()`` (overridden): where the leader appends and sends a tick's entries, after
    the commit loop of ``_onTick``; ``__onBecomeLeader()`` (overridden) appends the term's no-op.
  - reads ``__getCurrentLogIndex()``, ``__conf.fullDumpFile``, ``raftCurrentTerm``.
``_liveness.py``
  - ``__raftElectionDeadline`` (written) and ``__generateRaftTimeout()``: compared with
    ``pysyncobj.syncobj.monotonicTime()`` (looked up at each call) at the start of ``_onTick``.
  - reads ``__selfNode``, ``__connectedToAnyone()`` (a node stands only when connected to someone),
    ``__otherNodes``, ``__transport.send(node, message)`` (a receiver ignores a message type it has no
    handler for: the keepalive), ``__lastResponseTime`` (node -> time of its last answer; removed members
    stay in it), ``_poller.poll(0)``.
``_guard.py``
  - reads ``__raftLog`` (entries are ``(command, index, term)``), ``__raftNextIndex`` (written back: the
    ``next_node_idx`` handler moves it back on an older success reply), ``raftCurrentTerm``,
    ``raftLastApplied``; the message shapes: ``append_entries`` (``term``, ``prevLogIdx``,
    ``prevLogTerm``, ``entries``, ``transmission``; the follower deletes every entry after
    ``prevLogIdx`` when its log is longer) and ``next_node_idx`` (``success``, ``reset``).
``_membership.py``
  - ``__parseChangeClusterRequest(command)`` (overridden): called on every entry appended or applied;
    None for anything but a membership entry; an exception escapes ``_onTick``.
  - ``__changeCluster(request)`` (overridden): the leader's check before appending; its test of
    ``__changeClusterIDx`` never refuses (nothing sets it).
  - ``__doChangeCluster(request, reverse=False)`` (overridden): applies a change when it is appended
    (undone with ``reverse``) and again as a no-op when applied; ``[kind, id, node, ...]``, builds the
    node from an address string; returns False for its own leader.
  - ``__updateClusterConfiguration(newNodes)`` (overridden): called when a dump is loaded.
  - ``addNodeToCluster`` / ``removeNodeFromCluster`` (overridden to refuse; ``syncobj_admin``'s
    ``add``/``remove`` call them).
  - ``_applyCommand(command, callback, _COMMAND_TYPE.MEMBERSHIP)``; reads ``__raftLog``,
    ``__raftCommitIndex``, ``__noopIDx``, ``__conf``, ``selfNode``, ``otherNodes``, ``raftLastApplied``,
    ``_isLeader()``, ``_getLeader()``.
``_compaction.py``
  - ``__tryLogCompaction()`` (overridden): called once per tick; reads ``logCompactionMinEntries``,
    ``logCompactionMinTime`` and ``logCompactionSplit`` from the conf at each call (we rewrite them),
    and ``__forceLogCompaction``.
  - the dump hooks: ``serializer(fileName, (last, prev, cluster))``, ``deserializer(fileName) -> (last,
    prev, cluster)``, ``serializeChecker() -> SERIALIZER_STATE``; a custom serializer turns pysyncobj's
    own fork off; pysyncobj renames the file it named into place after ``serializer`` returns.
  - reads ``__raftLog``, ``raftLastApplied``, ``selfNode``, ``_isLeader()``.
``_relay.py``
  - reads ``__raftLeader`` (None or the leader's node object) and ``__selfNode``; calls
    ``__transport.send(node, message)`` and ``_isLeader()``; a message type pysyncobj does not know is
    dropped by ``_syncobj.py``'s ``__onMessageReceived`` before pysyncobj's handler sees it.
``_node.py``
  - ``getStatus()`` (keys ``state``, ``leader``, ``raft_term``, ``commit_idx``, ``last_applied``,
    ``log_len``), ``isNodeConnected``, ``hasQuorum``, ``otherNodes``, ``raftCurrentTerm``,
    ``raftLastApplied``, ``_isLeader()``, ``_getLeader()``, ``forceLogCompaction()``,
    ``destroy_synchronous()``, ``FAIL_REASON``; ``__transport.refusals`` and ``__encryptor`` (ours).
``_config.py``
  - ``SyncObjConf`` fields: ``password``, ``journalFile``, ``fullDumpFile``, ``bindAddress``,
    ``appendEntriesUseBatch``, ``appendEntriesPeriod``, ``appendEntriesBatchSizeBytes``,
    ``raftMinTimeout``, ``raftMaxTimeout``, ``leaderFallbackTimeout``, ``connectionTimeout`` (at least
    ``raftMaxTimeout``), ``connectionRetryTime``, ``commandsQueueSize``, ``commandsWaitLeader``,
    ``dynamicMembershipChange``, ``logCompactionMinEntries``, ``logCompactionMinTime``; ``onReady`` and
    ``onStateChanged`` (set by ``_node.py``).
``_journal.py``
  - the ``Journal`` interface (``add``, ``clear``, ``deleteEntriesFrom``, ``deleteEntriesTo``,
    ``__getitem__``, ``__len__``, ``_destroy``, ``setRaftCommitIndex``, ``getRaftCommitIndex``,
    ``setCurrentTerm``, ``getCurrentTerm``, ``getVotedForNodeId``, ``onOneSecondTimer``), ``MetaStorer``
    (``getMeta``, ``storeMeta``), ``FileJournal`` (the previous release's file, read once to migrate),
    ``pysyncobj.pickle.dumps`` for the ``.meta`` file.
``_transport.py``
  - ``__encryptor`` (a set-only descriptor): assigned once in ``__init__`` (a Fernet when ``password`` is
    set, else None); the transport hands ``syncObj.encryptor`` to every connection.
  - ``TCPTransport``: ``addNode``, ``_createServer``, ``_server``, ``_connections``,
    ``_unknownConnections``, ``_onNewIncomingConnection``, ``_onTick``, ``destroy``, ``_syncObj``.
  - ``TcpServer``: ``bind``, ``__onNewConnection`` (overridden), ``__socket``, ``__poller``,
    ``__fileno``, ``__sendBufferSize``, ``__recvBufferSize``, ``__connectionTimeout``, ``__keepalive``,
    ``__onNewConnectionCallback``.
  - ``TcpConnection``: ``send``, ``connect``, ``disconnect``, ``state``, ``encryptor``, ``sendRandKey``,
    ``recvRandKey``, ``__tryReadBuffer`` and ``__processParseMessage`` (overridden; called from
    ``__processConnection``), ``__socket``, ``__writeBuffer``, ``__trySendBuffer``, ``__lastReadTime``;
    ``CONNECTION_STATE``; ``encryptor.SALT`` (the PBKDF2 salt); ``monotonic.monotonic``.
``_unpickler.py``
  - every unpickling site calls ``pysyncobj.pickle.loads``/``load`` looked up at call time, except
    ``pysyncobj.journal``, which imported ``loads`` by name: all three are replaced, before any
    ``SyncObj`` is built.

After an upgrade: ``tests/cluster/test_raft_pysyncobj.py`` fails on a new version until this list is
re-checked, and finds an overridden private name that no longer exists; the white-box tests
(``tests/cluster/test_raft_*.py``, ``test_membership_guards.py``) drive the overrides message by message.
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
