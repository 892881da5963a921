"""Whether a recovery could commit now: the voters that can vote against the quorum.

Rules kept here:
- A recovery commits only with ``quorum`` approving votes of the configured voters (docs/design.md §4), so
  a cluster whose writes are fine can still be unable to break a deadlock: with the voters n1-n3
  plus ``operator:admin`` and quorum 4, losing n3 leaves three voters.
- A node voter (``node:<id>``) counts when its node is reachable from where the question is asked
  (the node itself and the peers it is connected to). Operator and agent voters vote through any
  node: they count as reachable, and whether a person answers is theirs to say.
- Pure: the caller says which nodes are reachable; nothing here reads a clock or a socket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .ids import ActorKind, actor_kind


@dataclass(frozen=True, slots=True)
class Readiness:
    configured: bool
    quorum: int
    reachable: tuple[str, ...]
    """Voters that can vote now, sorted."""
    unreachable: tuple[str, ...]
    """Node voters whose node is not reachable, sorted."""

    @property
    def can_commit(self) -> bool:
        return self.configured and len(self.reachable) >= self.quorum

    def describe(self) -> str:
        if not self.configured:
            return "recovery is not configured (no voters): no deadlock can be broken"
        counted = f"{len(self.reachable)} of {len(self.reachable) + len(self.unreachable)} voters reachable"
        down = f" (down: {', '.join(self.unreachable)})" if self.unreachable else ""
        verdict = "a recovery can commit" if self.can_commit else "no recovery can commit"
        return f"{counted}{down}, quorum {self.quorum}: {verdict}"


def readiness(voters: Iterable[str], quorum: int, configured: bool, reachable_nodes: Iterable[str]) -> Readiness:
    """Which of ``voters`` can vote, given the node ids that are reachable."""
    nodes = set(reachable_nodes)
    up: list[str] = []
    down: list[str] = []
    for voter in sorted(set(voters)):
        kind = actor_kind(voter)
        (up if kind is not ActorKind.NODE or voter.partition(":")[2] in nodes else down).append(voter)
    return Readiness(configured, quorum, tuple(up), tuple(down))
