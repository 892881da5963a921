"""LangGraph and LangChain integration (``pip install 'waitgraph[langgraph]'``): register the waits
where the framework already waits. See docs/langgraph.md.

One line instruments a compiled graph, for every invocation::

    from waitgraph.sdk.langgraph import instrument

    graph = instrument(builder.compile(checkpointer=saver), session, name="planner")
    await graph.ainvoke(inputs, {"configurable": {"thread_id": "t-1"}})

- every node task is an execution, every invocation a run, with ids derived from the invocation
  (``thread_id``), so a resumed invocation finds them again; nothing is left RUNNING
  (:func:`instrument`);
- a subgraph or a ``Send`` fan-out is a delegation: the parent waits for each child, in the run;
- ``interrupt()`` is an approval wait whose provider is ``approver=``; ``Command(resume=...)``
  decides it;
- :class:`WaitgraphToolMiddleware` (LangChain's ``AgentMiddleware``) holds what a tool
  :func:`needs` while it runs, through the fair queue; :func:`side_effect` records into the ledger;
- :func:`current_execution` is the running node's execution, for code that holds or waits itself.

:func:`execution_node` and :func:`deadlock_retry` wire one node by hand.
"""

from ._graph import PARENT, RUN_METADATA, Instrumentation, current_execution, instrument
from ._node import ExecutionNode, deadlock_retry, execution_node
from ._tools import WaitgraphToolMiddleware, needs, side_effect

__all__ = [
    "PARENT",
    "RUN_METADATA",
    "ExecutionNode",
    "Instrumentation",
    "WaitgraphToolMiddleware",
    "current_execution",
    "deadlock_retry",
    "execution_node",
    "instrument",
    "needs",
    "side_effect",
]
