"""cluster/ops/render.py without a cluster: the JSON shape, plain tables, DOT quoting, and the decision
narratives for the kinds a live test does not reach (tie-break, shadow, reconciliation,
escalation)."""

from __future__ import annotations

import io

from waitgraph.ops import render
from waitgraph.proto.v1 import operator_pb2, types_pb2


def decision(kind: int, **fields: object) -> operator_pb2.DecisionView:
    scores = [
        operator_pb2.ScoreView(execution_id="exec:A", generation=2, external_side_effects=True),
        operator_pb2.ScoreView(execution_id="exec:B", generation=1, checkpoint=True),
        operator_pb2.ScoreView(execution_id="exec:C", generation=1, checkpoint=True, priority=5),
    ]
    base: dict[str, object] = dict(
        decision_id="d7",
        digest="ab" * 32,
        signature="0123456789abcdef",
        policy_version="victim-policy.v1",
        kind=kind,
        mode=types_pb2.ROLLOUT_MODE_AUTO,
        reason_code="policy_v1",
        scores=scores,
        at_ms=1_700_000_000_000,
    )
    base.update(fields)
    return operator_pb2.DecisionView(**base)  # type: ignore[arg-type]


def text(blocks: list[render.Block]) -> str:
    return render.plain(blocks)


def test_json_shape_numbers_enums_and_unset_optionals() -> None:
    view = operator_pb2.ExecutionView(
        execution_id="exec:A", run_id="r", agent_id="a", generation=3, status=types_pb2.EXEC_STATUS_WAITING
    )
    doc = render.message_json(view)
    assert list(doc)[:4] == ["execution_id", "run_id", "parent_id", "agent_id"]  # declaration order
    assert doc["parent_id"] is None and doc["generation"] == 3 and doc["status"] == "WAITING"
    st = operator_pb2.StatusResponse(mode=types_pb2.ROLLOUT_MODE_AUTO_SAFE, counters={"b": 2, "a": 1})
    doc = render.message_json(st)
    assert doc["mode"] == "auto-safe" and list(doc["counters"].items()) == [("a", 1), ("b", 2)]
    assert render.message_json(operator_pb2.Cycle())["proposal_status"] is None


def test_plain_tables_align_and_never_draw_boxes() -> None:
    out = io.StringIO()
    render.emit([render.Table(["name", "n"], [["alpha", 1], ["b", None], ["c", True]], "TITLE")], out, tty=False)
    assert out.getvalue() == "TITLE\nNAME   N\nalpha  1\nb      -\nc      yes\n"
    out = io.StringIO()
    render.emit([render.Table(["x"], [["y"]])], out, tty=True)
    assert "╭" in out.getvalue()


def test_dot_quotes_labels() -> None:
    assert render._dot_id('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    graph = operator_pb2.GraphResponse(
        executions=[operator_pb2.ExecutionView(execution_id='exec:q"x', generation=1)],
        waits=[operator_pb2.WaitView(waiter_id='exec:q"x', target_id="resource:r", reason='say "hi"')],
        targets=[operator_pb2.TargetView(target_id="resource:r", holders=[operator_pb2.HolderView(execution_id="e")])],
    )
    dot = render.graph_dot(graph)
    assert '"exec:q\\"x" -> "resource:r" [label="waits: say \\"hi\\""];' in dot
    assert "\n" not in dot.split("label=", 2)[2].split("];")[0]  # labels stay on one line


def test_policy_order_and_the_decisive_term() -> None:
    d = decision(types_pb2.DECISION_KIND_VICTIM, winner_id="exec:B", winner_generation=1, epoch=4, epoch_before=3)
    assert render.policy_order(d) == ["exec:B", "exec:C", "exec:A"]
    assert render.decisive_term(d) == ("priority", "has the lower priority")
    story = text(render.explain_blocks(d, None, []))
    assert "It chose exec:B: it has the lower priority (decided by priority against exec:C)" in story
    assert "Epoch 3 -> 4 was committed first" in story


def test_tie_break_narrative() -> None:
    roles = [
        operator_pb2.RoleView(execution_id="exec:A", role="winner"),
        operator_pb2.RoleView(execution_id="exec:B", role="yielded"),
        operator_pb2.RoleView(execution_id="exec:C", role="rolled_back"),
    ]
    d = decision(
        types_pb2.DECISION_KIND_TIE_BREAK,
        reason_code="same_signature_without_epoch_advance",
        winner_id="exec:A",
        epoch=9,
        epoch_before=8,
        roles=roles,
        released=[operator_pb2.ReleaseView(target_id="resource:browser", execution_id="exec:C")],
    )
    earlier = operator_pb2.ProposalView(
        digest="cd" * 32, signature="0123456789abcdef", decision_id="d6", status=types_pb2.PROPOSAL_STATUS_COMMITTED
    )
    story = text(render.explain_blocks(d, None, [earlier]))
    assert "LIVELOCK (same_signature_without_epoch_advance)" in story
    assert "lowest id, exec:A, win; yielded: exec:B; rolled back: exec:C. Epoch 8 -> 9" in story
    assert "Released, after the epoch commit, in this order: resource:browser (from exec:C)." in story
    assert "was seen before: d6 (COMMITTED, epoch 0)" in story
    doc = render.explain_json(d, None, [earlier])
    assert doc["kind"] == "TIE_BREAK" and doc["signature_history"][0]["decision_id"] == "d6"


def test_shadow_reconciliation_escalation_narratives() -> None:
    shadow = decision(
        types_pb2.DECISION_KIND_SHADOW,
        mode=types_pb2.ROLLOUT_MODE_SHADOW,
        reason_code="shadow_mode",
        winner_id="exec:B",
    )
    assert "Had recovery acted, the victim would have been exec:B" in text(render.explain_blocks(shadow, None, []))
    assert "epoch:" in text(render.explain_blocks(shadow, None, [])) and "not advanced" in text(
        render.explain_blocks(shadow, None, [])
    )
    recon = decision(types_pb2.DECISION_KIND_RECONCILIATION, reason_code="unknown_side_effect")
    assert "UNKNOWN side effect" in text(render.explain_blocks(recon, None, []))
    esc = decision(types_pb2.DECISION_KIND_ESCALATION, reason_code="exceeds_max_rollback")
    assert "escalated" in text(render.explain_blocks(esc, None, []))


def test_decisions_say_what_the_chosen_execution_is() -> None:
    victim = decision(types_pb2.DECISION_KIND_VICTIM, winner_id="exec:B", winner_generation=1, epoch=4)
    shadow = decision(
        types_pb2.DECISION_KIND_SHADOW,
        decision_id="d8",
        winner_id="exec:B",
        winner_generation=1,
        reason_code="shadow_mode",
    )
    tie = decision(
        types_pb2.DECISION_KIND_TIE_BREAK, decision_id="d9", winner_id="exec:A", winner_generation=2, epoch=5
    )
    out = text(render.decisions_blocks(operator_pb2.ListDecisionsResponse(decisions=[victim, shadow, tie], retained=3)))
    header = next(line for line in out.splitlines() if line.startswith("DECISION "))
    assert "CHOSEN" in header and "WINNER" not in header
    assert "victim exec:B@g1" in out
    assert "would-be victim exec:B@g1" in out
    assert "winner exec:A@g2" in out


def test_a_shadow_proposal_says_it_did_nothing() -> None:
    digest = "ef" * 32
    reply = operator_pb2.CyclesResponse(
        cycles=[
            operator_pb2.Cycle(
                digest=digest, signature="0123456789abcdef", proposal_status=types_pb2.PROPOSAL_STATUS_COMMITTED
            )
        ],
        proposals=[
            operator_pb2.ProposalView(
                digest=digest, status=types_pb2.PROPOSAL_STATUS_COMMITTED, decision_id="d1", close_reason="SHADOW"
            )
        ],
    )
    out = text(render.cycles_blocks(reply))
    assert out.count("SHADOW: nothing done") == 2, out
    acted = operator_pb2.CyclesResponse(
        proposals=[
            operator_pb2.ProposalView(
                digest=digest, status=types_pb2.PROPOSAL_STATUS_COMMITTED, decision_id="d2", close_reason="VICTIM"
            )
        ]
    )
    assert "COMMITTED (VICTIM)" in text(render.cycles_blocks(acted))


def test_an_empty_history_says_when_settled_work_retires() -> None:
    reply = operator_pb2.HistoryResponse(node_id="n1", max_bytes=10**9, max_age_days=30, retention_ms=300_000)
    out = text(render.history_blocks(reply))
    assert "nothing retired matches" in out
    assert "once it has been settled for 5 min 00 s (--retention-ms)" in out, out


def test_explain_names_both_forms_of_a_bad_decision_argument_as_typed() -> None:
    from click.testing import CliRunner

    from waitgraph.ops.cli import main

    result = CliRunner().invoke(main, ["--endpoints", "127.0.0.1:1", "--token", "t", "explain", "dXYZ"])
    assert result.exit_code == 2, result.output
    assert "'dXYZ' is neither a decision id" in result.output and "nor a recovery digest" in result.output


def test_a_bad_target_id_is_hinted_with_a_target_id() -> None:
    from waitgraph.proto.v1 import agent_pb2
    from waitgraph.sdk.errors import error_from_result
    from waitgraph.statemachine.errors import invalid
    from waitgraph.statemachine.outcome import rejected
    from waitgraph.wire import convert

    def refused(field: str) -> str:
        rejection = invalid(
            "unresolvable_id",
            f"{field}='browser' is not a resolvable id; expected <kind>:<name> such as exec:review-1",
            field=field,
        )
        result = agent_pb2.WriteResult(
            status_code=3,
            code="unresolvable_id",
            details=rejection.message,
            outcome=convert.outcome_to_proto(rejected(rejection)),
        )
        err = error_from_result(result, None, None)
        assert err is not None
        return str(err)

    assert "such as resource:browser-1 or artifact:review-1" in refused("target_id")
    assert "exec:review-1" not in refused("target_id")
    assert "such as exec:review-1" in refused("execution_id")
