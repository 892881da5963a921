"""``scripts/trace_screenshot``: one agent's trace with its wait and the deadlock decision, drawn
from exported spans and photographed for docs/observability.md.

    python -m waitgraph.dev.tracepage                      # stage, capture, draw, photograph
    python -m waitgraph.dev.tracepage --spans spans.json   # draw spans captured before (no cluster)

The scene: a local 3-node cluster in auto mode and two agents, ``planner`` and ``reviewer``, whose
executions wait for each other; each agent runs in its own ``invoke_agent`` span (as an agent
framework that traces would). The nodes and the agents export over OTLP/gRPC
(``OTEL_EXPORTER_OTLP_ENDPOINT``) to :class:`waitgraph.dev.otlp.Receiver`; the page is a waterfall
of the victim agent's trace (its spans on one time axis, events as marks) with the recovery span
the node made, whose links point into it, drawn below on the same axis.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from waitgraph.dev.otlp import Receiver, Span, load

DOC_PNG = Path(__file__).resolve().parents[2] / "docs" / "observability-trace.png"
AGENTS = ("planner", "reviewer")


# -- the page ------------------------------------------------------------------------------------------


def _tree(spans: list[Span]) -> list[tuple[int, Span]]:
    """(depth, span) in tree order, children by start time."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for s in spans:
        children.setdefault(s.parent_span_id if s.parent_span_id in ids else "", []).append(s)
    out: list[tuple[int, Span]] = []

    def walk(parent: str, depth: int) -> None:
        for s in sorted(children.get(parent, ()), key=lambda x: (x.start_ns, x.name)):
            out.append((depth, s))
            walk(s.span_id, depth + 1)

    walk("", 0)
    return out


_SHOWN = (
    "gen_ai.agent.id",
    "waitgraph.wait.target_id",
    "waitgraph.wait.close_reason",
    "waitgraph.execution.generation",
    "rpc.response.status_code",
    "waitgraph.decision.id",
    "waitgraph.recovery.victim",
    "waitgraph.recovery.remedy",
    "waitgraph.epoch",
)


def _label(s: Span) -> str:
    shown = [f"{k.rpartition('.')[2]}={s.attributes[k]}" for k in _SHOWN if k in s.attributes]
    return ", ".join(shown)


def render(spans: list[Span], trace_id: str, title: str) -> str:
    """The waterfall page of ``trace_id``, with every span elsewhere that links into it."""
    own = [s for s in spans if s.trace_id == trace_id]
    linked = [s for s in spans if s.trace_id != trace_id and any(lk.trace_id == trace_id for lk in s.links)]
    shown = own + linked
    t0 = min(s.start_ns for s in shown)
    t1 = max(s.end_ns for s in shown)
    width = max(t1 - t0, 1)

    def pct(ns: int) -> float:
        return 100.0 * (ns - t0) / width

    by_id = {s.span_id: s for s in own}
    rows: list[str] = []

    def row(depth: int, s: Span, extra: str = "") -> None:
        left, right = pct(s.start_ns), pct(s.end_ns)
        kind = {"SERVER": "server", "CLIENT": "client"}.get(s.kind, "internal")
        if s.name == "waitgraph.wait":
            kind = "wait"
        elif s.name == "waitgraph.recovery":
            kind = "recovery"
        elif s.name.startswith("invoke_agent"):
            kind = "agent"
        marks = "".join(
            f'<span class="mark" style="left:{pct(e.time_ns):.2f}%" title="{html.escape(e.name)}"></span>'
            f'<span class="marklabel{" end" if pct(e.time_ns) > 60 else ""}" style="left:{pct(e.time_ns):.2f}%">'
            f"{html.escape(_event_text(e.name, e.attributes))}</span>"
            for e in s.events
            if e.name in ("waitgraph.decision", "waitgraph.recovery.commit", "waitgraph.recovery.propose")
        )
        dur_ms = (s.end_ns - s.start_ns) / 1e6
        # a duration near the right edge goes inside a wide bar, or before a narrow one
        place = "" if right <= 85 else " inside" if right - left > 8 else " before"
        at = left if place == " before" else right
        rows.append(
            f'<div class="row {kind}"><div class="name" style="padding-left:{8 + 16 * depth}px">'
            f'<b>{html.escape(s.name)}</b> <span class="svc">{html.escape(s.service)}</span>{extra}'
            f'<div class="attrs">{html.escape(_label(s))}</div></div>'
            f'<div class="lane"><span class="bar" style="left:{left:.2f}%;width:{max(right - left, 0.3):.2f}%"></span>'
            f'<span class="dur{place}" style="left:{at:.2f}%">{dur_ms:.1f} ms</span>'
            f"{marks}</div></div>"
        )

    for depth, s in _tree(own):
        row(depth, s)
    for s in linked:
        targets = [by_id[lk.span_id].attributes.get("gen_ai.agent.id", "?") for lk in s.links if lk.span_id in by_id]
        others = len(s.links) - len(targets)
        text = f" linked: {', '.join(map(str, targets))}'s wait + {others} other"
        rows.append('<div class="sep">linked from another trace</div>')
        row(0, s, f'<span class="link">{html.escape(text)}</span>')
    return PAGE.format(title=html.escape(title), rows="\n".join(rows), total=f"{width / 1e6:.0f} ms")


def _event_text(name: str, attrs: dict[str, object]) -> str:
    if name == "waitgraph.decision":
        return (
            f"decision {attrs.get('waitgraph.decision.id', '?')}: {attrs.get('waitgraph.decision.role', '?')}, "
            f"epoch {attrs.get('waitgraph.decision.epoch', '?')}"
        )
    return name.rpartition(".")[2]


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ font: 13px/1.35 system-ui, sans-serif; margin: 18px; color: #1d2330; background: #fff; }}
h1 {{ font-size: 16px; margin: 0 0 4px; }} .sub {{ color: #5b6577; margin-bottom: 12px; }}
.row {{ display: grid; grid-template-columns: 470px 1fr; border-bottom: 1px solid #eef0f4; min-height: 34px; }}
.name {{ padding: 4px 6px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }}
.svc {{ color: #7a8496; font-size: 11px; margin-left: 4px; }} .attrs {{ color: #5b6577; font-size: 11px; }}
.link {{ color: #8a4b00; font-size: 11px; margin-left: 4px; }}
.lane {{ position: relative;
  background: repeating-linear-gradient(90deg,#fafbfd 0,#fafbfd 10%,#f1f3f7 10%,#f1f3f7 10.1%); }}
.bar {{ position: absolute; top: 9px; height: 14px; border-radius: 3px; background: #8fa3c4; }}
.agent .bar {{ background: #5a6f94; }} .wait .bar {{ background: #d98b2b; }}
.client .bar {{ background: #7fa7d9; }} .server .bar {{ background: #4f8fcf; }}
.recovery .bar {{ background: #c4453c; }} .recovery {{ background: #fff6f5; }}
.dur {{ position: absolute; top: 9px; font-size: 10px; color: #5b6577; margin-left: 4px; white-space: nowrap; }}
.mark {{ position: absolute; top: 4px; width: 3px; height: 24px; background: #1d2330; }}
.marklabel {{ position: absolute; top: -2px; font-size: 10px; font-weight: 600; margin-left: 5px; white-space: nowrap;
  background: #ffffffcc; }}
.marklabel.end {{ transform: translateX(calc(-100% - 10px)); }}
.dur.inside {{ transform: translateX(calc(-100% - 8px)); color: #fff; }}
.dur.before {{ transform: translateX(calc(-100% - 8px)); }}
.sep {{ margin-top: 10px; padding: 4px 6px; color: #8a4b00; font-size: 12px; border-top: 2px solid #c4453c; }}
</style></head><body>
<h1>{title}</h1><div class="sub">waterfall of the exported spans (OTLP), {total} across; marks are span events</div>
{rows}
</body></html>
"""


# -- the scene -----------------------------------------------------------------------------------------


async def _scene(endpoints: list[str], tokens: dict[str, str]) -> str:
    """The two agents' deadlock; returns the victim agent's name."""
    from opentelemetry import trace

    from waitgraph.sdk import Client, DeadlockVictim

    tracer = trace.get_tracer("waitgraph-demo")
    ready = {a: asyncio.Event() for a in AGENTS}
    victim: list[str] = []

    async def agent(name: str, other: str) -> None:
        async with Client(endpoints, tokens[name]) as client, client.session(name) as s:
            with tracer.start_as_current_span(f"invoke_agent {name}", attributes={"gen_ai.agent.id": name}):
                try:
                    async with (
                        s.execution(f"exec:{name}-task", run_id=f"run-{name}") as ex,
                        ex.waiting_for(f"exec:{other}-task") as w,
                    ):
                        ready[name].set()
                        await asyncio.gather(*(e.wait() for e in ready.values()))
                        await w.resolved(timeout_s=40)
                except DeadlockVictim:
                    victim.append(name)

    await asyncio.wait_for(asyncio.gather(agent(*AGENTS), agent(*reversed(AGENTS))), 60)
    return victim[0]


def capture(out_json: Path) -> str:
    """Stage the scene on a fresh local cluster, write every span received to ``out_json``; the
    victim agent's name."""
    from waitgraph.dev.localcluster import LocalCluster
    from waitgraph.wire import tracing

    with Receiver() as receiver:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"
        if not tracing.configure("agents"):
            raise RuntimeError("tracing could not be configured (is the [otel] extra installed?)")
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        lc = LocalCluster(
            nodes=3,
            mode="auto",
            agents=AGENTS,
            serve_args=["--recovery-confirmation-window-ms", "300"],
            extra_env=lambda _m: env,
        )
        try:
            lc.start()
            lc.wait_for_leader(30)
            assert lc.credentials is not None
            victim = asyncio.run(_scene(lc.endpoints, dict(lc.credentials.agents)))
            tracing.shutdown()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not receiver.spans(lambda s: s.name == "waitgraph.recovery"):
                time.sleep(0.2)
            receiver.dump(out_json)
        finally:
            lc.close()
    return victim


def trace_of(spans: Iterable[Span], agent: str) -> str:
    return next(s.trace_id for s in spans if s.name == f"invoke_agent {agent}")


def photograph(page_html: str, out_png: Path, size: tuple[int, int]) -> None:
    from waitgraph.dev.showcase import browser_page, find_chromium

    browser = find_chromium()
    if browser is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="waitgraph-trace-") as d:
        page_file = Path(d) / "trace.html"
        page_file.write_text(page_html)
        with browser_page(browser, size) as page:
            page.goto(page_file.as_uri())
            page.screenshot(path=str(out_png), full_page=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/trace_screenshot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=Path, help="draw these captured spans (JSON) instead of staging the scene")
    parser.add_argument("--agent", help="whose trace to draw (default: the victim of the staged scene)")
    parser.add_argument("--keep-spans", type=Path, help="also write the captured spans here (JSON)")
    parser.add_argument("--html", type=Path, help="also write the page here")
    parser.add_argument("--out", type=Path, default=DOC_PNG, help=f"the picture (default {DOC_PNG})")
    parser.add_argument("--size", default="1500,640", help="viewport W,H (the picture is the full page)")
    args = parser.parse_args(argv)
    if args.spans is not None:
        spans_path, agent = args.spans, args.agent or AGENTS[0]
    else:
        spans_path = args.keep_spans or Path(tempfile.mkdtemp(prefix="waitgraph-spans-")) / "spans.json"
        agent = capture(spans_path)
        agent = args.agent or agent
    spans = load(spans_path)
    page_html = render(
        spans, trace_of(spans, agent), f"Agent {agent}'s trace: its wait, and the decision that broke it"
    )
    if args.html is not None:
        args.html.write_text(page_html)
    w, h = (int(x) for x in args.size.split(","))
    photograph(page_html, args.out, (w, h))
    print(f"wrote {args.out} ({agent}'s trace, {len(spans)} spans captured in {spans_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
