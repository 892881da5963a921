"""tests/world.py's scenario driver, with every command applied through a node's Raft apply path.

The node is a :class:`waitgraph.node.raft._syncobj.WaitgraphSyncObj` without network or tick thread
(tests/cluster/fakes.py); each command is encoded as the gRPC gateway encodes it and applied by
the replicated method, on the node's state machine (an ``EventfulMachine`` when given one, so
the decision log sees what a serving node's would).
"""

from __future__ import annotations

from pathlib import Path

from tests.world import World
from waitgraph.statemachine import Envelope, Outcome, StateMachine, encode_envelope

from .fakes import follower


class NodeWorld(World):
    def __init__(self, tmp: Path, machine: StateMachine | None = None) -> None:
        super().__init__()
        self.node = follower(tmp, machine=machine if machine is not None else StateMachine())
        self.m = machine if machine is not None else self.node._machine

    def do(self, actor: str, cmd: object, dt: int = 1) -> Outcome:
        self.t += dt
        self.rid += 1
        env = Envelope(actor=actor, at_ms=self.t, request_id=f"req-{self.rid}", command=cmd)  # type: ignore[arg-type]
        [out] = self.node.apply_commands(encode_envelope(env), _doApply=True)
        return out  # type: ignore[no-any-return]

    def close(self) -> None:
        self.node._doDestroy()
