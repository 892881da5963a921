"""Recovery's voter set follows the Raft membership (docs/deploy.md, "Membership changes").

Rules kept here:
- The node voters of the recovery configuration become ``node:<id>`` of every member; operator
  and agent voters stay as they are.
- The number of voters that may be missing (voters minus quorum) stays the same, so a cluster
  that tolerated one silent voter still tolerates exactly one; ``max_rollback`` stays, or stays
  ``quorum - 1`` when it was that (the bootstrap's default).
- The result is checked by the core's own rule (:func:`waitgraph.node.config.recovery_refusal`:
  the quorum must exceed ``max_rollback`` and not exceed the voters) *before* the membership
  changes: a change after which recovery could not be configured is refused, and nothing changes.
- Order: a member is added to Raft first and to the voters after; a member leaves the voters
  first and Raft after. In between, recovery runs under a configuration the core accepted, and
  a vote of a voter that left no longer counts (the commit counts the configured voters' votes).
"""

from __future__ import annotations

from collections.abc import Iterable

from waitgraph.statemachine.commands import ConfigureRecovery
from waitgraph.statemachine.ids import ActorKind, actor_kind
from waitgraph.statemachine.recovery_state import RecoveryConfig


def following_config(current: RecoveryConfig, member_ids: Iterable[str]) -> ConfigureRecovery | None:
    """The ConfigureRecovery whose node voters are the members ``member_ids``; None when recovery
    is not configured (nothing to follow) or its node voters already are those members."""
    if not current.voters:
        return None
    kept = [v for v in current.voters if actor_kind(v) is not ActorKind.NODE]
    voters = tuple(sorted({*kept, *(f"node:{m}" for m in member_ids)}))
    if voters == tuple(sorted(current.voters)):
        return None
    missing_allowed = len(current.voters) - current.quorum
    quorum = max(len(voters) - missing_allowed, 1)
    max_rollback = quorum - 1 if current.max_rollback == current.quorum - 1 else current.max_rollback
    return ConfigureRecovery(
        voters=voters,
        quorum=quorum,
        max_rollback=max_rollback,
        confirmation_window_ms=current.confirmation_window_ms,
        livelock_repeats=current.livelock_repeats,
        livelock_window_ms=current.livelock_window_ms,
    )
