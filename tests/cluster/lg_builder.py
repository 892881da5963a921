"""The builder agent of test_langgraph's two-process test, run as its own process: a LangChain v1
agent (``create_agent``, a fake chat model) whose ``build`` tool needs the GPU through
:class:`WaitgraphToolMiddleware`, and whose ``publish`` tool produces the dataset the other
process's planner waits for.

Usage: python tests/cluster/lg_builder.py ENDPOINTS TOKEN TAG prevent|victim
Prints one JSON object: the tool messages the model saw, in order.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from waitgraph import Client
from waitgraph.sdk.langgraph import WaitgraphToolMiddleware, current_execution, instrument


class ToolCallingFake(GenericFakeChatModel):
    """langchain-core's fake chat model, scripted with AIMessages that carry tool calls."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def call(name: str, n: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": {}, "id": f"call-{name}-{n}"}])


async def main(endpoints: str, token: str, t: str, how: str) -> None:
    gpu, dataset = f"resource:gpu-{t}", f"artifact:dataset-{t}"

    @tool
    async def build() -> str:
        """Build the model on the GPU."""
        return "built"

    @tool
    async def publish() -> str:
        """Publish the dataset."""
        await current_execution().session.produce(dataset)
        return "published"

    # First the build (it needs the GPU the planner holds while it waits for our dataset); told
    # why it cannot, the model publishes first and builds again.
    model = ToolCallingFake(messages=iter([call("build", 1), call("publish", 2), call("build", 3), AIMessage("done")]))
    middleware = WaitgraphToolMiddleware({"build": [gpu]}, refuse_deadlock=how == "prevent")
    agent = create_agent(model, tools=[build, publish], middleware=[middleware], checkpointer=InMemorySaver())
    async with Client(endpoints.split(","), token) as client, client.session("b") as s:
        graph = instrument(agent, s, name=f"builder-{t}", produces=[dataset])
        final = await graph.ainvoke({"messages": [("user", "build it")]}, {"configurable": {"thread_id": t}})
    tools = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    seen = [{"name": m.name, "status": m.status, "content": m.content} for m in tools]
    print(json.dumps({"tools": seen, "last": final["messages"][-1].content}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
