"""Membership changes, guarded: one at a time, by the leader, never past a quorum that cannot answer.

**Membership** (:meth:`RaftNode.change_membership`, ``waitgraph member``, docs/deploy.md section 6).
pysyncobj applies a change when the entry is *appended* (Raft's single-server change: the leader
at ``_checkCommandsToApply``, a follower in its ``append_entries`` handler, both through
``__doChangeCluster``; a truncated change is undone), and again, as a no-op, when it is applied.
What it gets wrong, and what is done about it:

- Its "previous change not committed yet" test (``__changeCluster``) reads ``__changeClusterIDx``,
  which nothing ever sets: it never refuses a second change. :meth:`WaitgraphSyncObj.pending_membership`
  finds a membership entry after the commit index in the log; the leader refuses a change while
  there is one (and before the no-op of its term is applied, which pysyncobj does check), both in
  the guards and in ``__changeCluster`` itself.
- Its entries pickle a ``TCPNode`` (``addNodeToCluster``: ``['add', id, node]``), which the
  restricted unpickler refuses. Ours are ``['add'|'rem', address, address, {"id", "grpc"}]``:
  pysyncobj builds the node from the address string itself, and the last item (ignored by it) is
  the directory entry that tells every replica the new member's node id and gRPC address
  (:attr:`WaitgraphSyncObj.directory`, also saved in every dump). ``__parseChangeClusterRequest``
  (called on every entry appended or applied; an exception there escapes ``_onTick`` on every
  tick) returns None for anything else: an undecodable or foreign membership entry is a no-op
  everywhere. ``addNodeToCluster``/``removeNodeFromCluster`` (and ``syncobj_admin``'s utility
  messages) are refused.
- Its dump holds the membership of *now*, with changes after the dump's last entry already in
  effect; ours holds the membership as of that entry (``_membership_at`` undoes the later ones).
  On load it compares each address string of the dump with its own ``Node``, which never match,
  and would count itself as one of its peers: :meth:`WaitgraphSyncObj._read_dump` drops it.
- It cannot remove its own leader (``__doChangeCluster`` returns False): refused up front
  (``member_is_leader``).
- Issue #89 (a node added by address before it is bound there): the leader probes the new Raft
  address first (:func:`~waitgraph.node.raft._transport.probe_member`: a handshake sealed with the
  cluster secret must come back).
- :func:`membership_refusal`: the quorum of the membership *after* the change must answer the
  leader now, not counting the new member (no log yet) nor the leaving one.
- pysyncobj keeps the response times of removed members; :meth:`RaftNode.has_quorum` counts only
  current ones. The compaction slots follow the membership.

The guards run on the tick thread (:meth:`WaitgraphSyncObj.call_on_tick`), twice: once before the
caller's ``before`` step (the voters leaving recovery's configuration, cluster/node/membership.py),
then again with the append, so nothing changes between the last check and the entry. A node that
is not a member yet (started with the members as its peers) is not connected to: the members
drop connections from addresses they do not know (``TCPTransport``), so it neither campaigns nor
disturbs a term until it is added; a removed node is dropped the same way once the change is
appended.

pysyncobj names overridden here: ``_SyncObj__parseChangeClusterRequest``, ``_SyncObj__changeCluster``,
``_SyncObj__doChangeCluster``, ``_SyncObj__updateClusterConfiguration``, ``addNodeToCluster`` and
``removeNodeFromCluster`` (refused); read: ``_SyncObj__raftLog``, ``_SyncObj__raftCommitIndex``,
``_SyncObj__noopIDx``, ``_SyncObj__conf``, ``_SyncObj__lastResponseTime`` (through
:func:`~waitgraph.node.raft._liveness.answered_within`), ``selfNode``, ``otherNodes``, ``raftLastApplied``,
``_isLeader``, ``_getLeader``; called: ``_applyCommand`` with ``COMMAND_TYPE.MEMBERSHIP``. Checklist:
``_pysyncobj.py``.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any

from waitgraph.node.errors import MembershipRefused, NotLeader
from waitgraph.node.raft._liveness import answered_within
from waitgraph.node.raft._pysyncobj import COMMAND_TYPE, SyncObj, pysyncobj_pickle
from waitgraph.node.raft._transport import PICKLE_PROTOCOL

logger = logging.getLogger("waitgraph.node.raft")


class MembershipMixin(SyncObj):  # type: ignore[misc]
    """The membership guards of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj` (module docstring);
    everything here runs on the tick thread but :meth:`members_now`."""

    directory: dict[str, tuple[str, str]]
    counters: dict[str, int]
    _compaction_rank: int
    _compaction_members: int

    def members_now(self) -> list[tuple[str, str, str]]:
        """(Raft address, node id, gRPC address) of every member as this replica has it, by address."""
        for _ in range(3):
            try:
                others = [n.address for n in self.otherNodes]
                break
            except RuntimeError:  # the set changed size under us (tick thread); try again
                continue
        else:
            others = []
        addresses = sorted({self.selfNode.address, *others})
        return [(a, *self.directory.get(a, (a, ""))) for a in addresses]

    def pending_membership(self) -> int | None:
        """The log index of a membership change appended and not committed yet, if any."""
        log = self._SyncObj__raftLog
        if not len(log):
            return None
        first = log[0][1]
        for pos in range(max(0, int(self._SyncObj__raftCommitIndex) + 1 - first), len(log)):
            entry = log[pos]
            if entry[0][:1] == _MEMBERSHIP_TAG:
                return int(entry[1])
        return None

    def propose_membership_change(
        self, kind: str, address: str, node_id: str, grpc_address: str, callback: Callable[[Any, Any], None] | None
    ) -> None:
        """Check the guards, then queue the change for this tick's ``_checkCommandsToApply``.

        Tick thread (:meth:`call_on_tick`), so that nothing changes between the checks and the
        append. Raises :class:`NotLeader` or :class:`MembershipRefused`; ``callback(result, error)``
        is pysyncobj's, called when the entry commits (or is refused or discarded). Without a
        callback only the guards run (nothing is proposed)."""
        if not self._isLeader():
            leader = self._getLeader()
            raise NotLeader(
                "membership changes are made by the leader", leader=None if leader is None else str(leader.address)
            )
        noop = self._SyncObj__noopIDx
        if noop is None or self.raftLastApplied < noop:
            raise self._refused("change_pending", "the leader has not committed the first entry of its term yet")
        pending = self.pending_membership()
        if pending is not None:
            raise self._refused(
                "change_pending",
                f"the membership change at log index {pending} is not committed yet: one change at a time",
                log_index=pending,
            )
        me = self.selfNode.address
        others = {n.address: n for n in self.otherNodes}
        recent = answered_within(self, float(self._SyncObj__conf.waitgraph_quorum_window_s))
        healthy = {me} | {a for a, n in others.items() if n in recent}
        ids = {a: self.directory.get(a, (a, ""))[0] for a in {me, *others}}
        refusal = membership_refusal(kind, address, node_id, me=me, members=ids, healthy=healthy)
        if refusal is not None:
            self.counters["membership_refused"] += 1
            raise refusal
        if callback is None:
            return
        meta = {"grpc": grpc_address, "id": node_id} if kind == "add" else {}
        # [kind, id, node, meta]: pysyncobj's own shape but with the node as its address string (it
        # builds the TCPNode itself) and our directory entry appended, so the entry unpickles
        # without a single global (``_unpickler.py`` keeps refusing TCPNode).
        command = pickle.dumps([kind, address, address, meta], PICKLE_PROTOCOL)
        self._applyCommand(command, callback, COMMAND_TYPE.MEMBERSHIP)

    def _refused(self, code: str, message: str, **fields: Any) -> MembershipRefused:
        self.counters["membership_refused"] += 1
        return MembershipRefused(code, message, **fields)

    # pysyncobj's own entry points (``addNodeToCluster``, ``removeNodeFromCluster``, and the
    # ``add``/``remove`` utility messages of ``syncobj_admin`` that call them) pickle a TCPNode and
    # skip every guard above: refused. The transport answers a utility message with the error text.
    def addNodeToCluster(self, node: Any, callback: Any = None) -> None:
        raise RuntimeError("membership changes go through `waitgraph member add` (the leader's guards)")

    def removeNodeFromCluster(self, node: Any, callback: Any = None) -> None:
        raise RuntimeError("membership changes go through `waitgraph member remove` (the leader's guards)")

    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list[Any] | None:
        # pysyncobj calls this on every entry it appends or applies; an exception there escapes
        # ``_onTick`` (and would be raised again on every tick). An entry that is not a change of
        # ours (:func:`_valid_change`) is none at all: appended and applied as a no-op everywhere.
        if command[:1] != _MEMBERSHIP_TAG:
            return None
        try:
            request = pysyncobj_pickle.loads(command[1:])
        except Exception:
            request = None
        if not _valid_change(request):
            self.counters["membership_undecodable"] += 1
            logger.error("ignoring a membership entry that is not a waitgraph membership change")
            return None
        return request  # type: ignore[no-any-return]

    def _SyncObj__changeCluster(self, request: list[Any]) -> bool:
        # The leader, before appending a change. pysyncobj's "previous change not committed yet"
        # test reads ``__changeClusterIDx``, which nothing in pysyncobj ever sets: it never refuses.
        if self.pending_membership() is not None:
            self.counters["membership_refused"] += 1
            return False
        return bool(super()._SyncObj__changeCluster(request))

    def _SyncObj__doChangeCluster(self, request: list[Any], reverse: bool = False) -> bool:
        changed = bool(super()._SyncObj__doChangeCluster(request, reverse))
        if changed:
            if request[0] == "add" and not reverse and len(request) >= 4 and type(request[3]) is dict:
                meta = request[3]
                self.directory[request[1]] = (str(meta.get("id") or request[1]), str(meta.get("grpc") or ""))
            self.counters["membership_changes"] += 1
            logger.info("membership: %s %s%s", request[0], request[1], " (rolled back)" if reverse else "")
            self._membership_changed()
        return changed

    def _SyncObj__updateClusterConfiguration(self, newNodes: Any) -> None:
        super()._SyncObj__updateClusterConfiguration(newNodes)  # a dump loaded: its membership
        self._membership_changed()

    def _membership_changed(self) -> None:
        members = sorted({self.selfNode.address, *(n.address for n in self.otherNodes)})
        self._compaction_rank = members.index(self.selfNode.address)
        self._compaction_members = len(members)

    def _membership_at(self, index: int, members: set[str]) -> list[str]:
        """The members as of log ``index``: changes take effect when appended (Raft's single-server
        rule, as pysyncobj does it), so those after ``index`` are undone on a copy."""
        log = self._SyncObj__raftLog
        out = set(members)
        if len(log):
            first = log[0][1]
            for pos in range(len(log) - 1, max(index + 1 - first, 0) - 1, -1):
                request = self._SyncObj__parseChangeClusterRequest(log[pos][0])
                if request is not None:
                    (out.discard if request[0] == "add" else out.add)(request[1])
        return sorted(out)


def membership_refusal(
    kind: str, address: str, node_id: str, *, me: str, members: dict[str, str], healthy: set[str]
) -> MembershipRefused | None:
    """Why the leader ``me`` must not propose this change now, or None (module docstring, "Membership").

    ``members``: Raft address -> node id of every member, the leader included; ``healthy``: the
    members that answered within the quorum window (the leader included). The quorum the
    membership will need *after* the change must answer now, counting neither a new member (it
    has no log yet) nor a leaving one (etcd's strict reconfiguration check); a one-member
    cluster may grow to two (it cannot do better).
    """
    if kind == "add":
        if address in members:
            return MembershipRefused("already_member", f"{address} is already a member", address=address)
        named = {n: a for a, n in members.items()}
        if node_id in named:
            return MembershipRefused(
                "id_in_use", f"{node_id} is already the member at {named[node_id]}", node_id=node_id
            )
        after = len(members) + 1
        counted = healthy & set(members)
        if len(members) == 1:
            return None
    elif kind == "rem":
        if address == me:
            return MembershipRefused(
                "member_is_leader",
                f"{address} is the leader; pysyncobj cannot remove its own leader: stop it first (another "
                "member takes over), then remove it",
                address=address,
            )
        if address not in members:
            return MembershipRefused("not_member", f"{address} is not a member", address=address)
        after = len(members) - 1
        counted = (healthy & set(members)) - {address}
    else:
        raise ValueError(f"unknown membership change {kind!r}")
    need = after // 2 + 1
    if len(counted) < need:
        return MembershipRefused(
            "quorum_at_risk",
            f"after this change {after} members need {need} to commit; only {len(counted)} answer now "
            f"({', '.join(sorted(counted))}): bring the others back first",
            members_after=after,
            needed=need,
            healthy=len(counted),
        )
    return None


_MEMBERSHIP_TAG = bytes([COMMAND_TYPE.MEMBERSHIP])


def _valid_change(request: Any) -> bool:
    """The one shape of membership entry this node writes: ``[kind, address, address, meta]``."""
    return (
        type(request) is list
        and len(request) == 4
        and request[0] in ("add", "rem")
        and type(request[1]) is str
        and request[1] == request[2]
        and _is_address(request[1])
        and type(request[3]) is dict
        and all(type(k) is str and type(v) is str for k, v in request[3].items())
    )


def _is_address(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
