"""The trailing-metadata keys of every waitgraph error (docs/api.md, "Errors").

The node writes them (:mod:`waitgraph.node.grpc_status`) and every client reads them (the SDK, the
operator client): one spelling for both sides.
"""

LEADER_KEY = "waitgraph-leader"
"""The leader's gRPC address, on UNAVAILABLE not-leader answers, when one is known."""
LEADER_ID_KEY = "waitgraph-leader-id"
"""The leader's node id, beside :data:`LEADER_KEY`."""
CODE_KEY = "waitgraph-code"
"""The rejection's stable code (``stale_generation``, ``no_target``, ...)."""
OUTCOME_KEY = "waitgraph-outcome-bin"
"""The serialized ``waitgraph.v1.Outcome`` of a REJECTED apply."""
RETRY_KEY = "waitgraph-retry"
"""``same-request-id`` when the outcome is unknown: retry with the same request id."""
