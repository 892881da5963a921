"""The synchronous twin: the same surface as the async SDK, for threads instead of tasks.

:class:`SyncClient` runs one asyncio event loop in a background thread and drives the async
:class:`~waitgraph.sdk.client.Client` on it; every method blocks the calling thread until the loop
has done the work. Context managers are plain ``with`` blocks::

    with SyncClient(endpoints=["127.0.0.1:50051"], token=TOKEN) as client:
        with client.session("reviewer") as s:
            with s.execution(run_id="run-7") as ex:
                with ex.waiting_for("artifact:review-42") as w:
                    w.resolved()

One difference, because a thread cannot be cancelled: a deadlock victim's blocked *SDK* call
(``w.resolved()``, acquiring in ``holding``, ``d.result()``) raises
:class:`~waitgraph.sdk.errors.DeadlockVictim`; if the thread is blocked on something else inside
the ``with`` block, the exception is raised when the block ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Awaitable, Coroutine, Iterator, Sequence
from typing import Any, Self, TypeVar

from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.outcome import Outcome

from .client import Client
from .connection import Connection, TokenSource, WatchedEvent
from .operator import OperatorClient
from .session import Delegation, Execution, ExecutionScope, Holding, Session, Wait

T = TypeVar("T")

__all__ = [
    "SyncClient",
    "SyncDelegation",
    "SyncExecution",
    "SyncExecutionScope",
    "SyncHolding",
    "SyncOperatorClient",
    "SyncSession",
    "SyncWait",
]


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="waitgraph-sdk-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, aw: Awaitable[T], timeout_s: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            if isinstance(aw, Coroutine):
                aw.close()
            raise RuntimeError("a SyncClient method was called from its own event loop thread")
        future = asyncio.run_coroutine_threadsafe(_awaited(aw), self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout_s}s") from None
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _Proxy:
    """Attributes of the wrapped async object, with its coroutine methods made blocking."""

    def __init__(self, runner: _LoopThread, target: Any) -> None:
        self._runner = runner
        self._target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            runner = self._runner

            def blocking(*args: Any, **kwargs: Any) -> Any:
                return runner.run(value(*args, **kwargs))

            blocking.__name__ = name
            blocking.__doc__ = value.__doc__
            return blocking
        return value

    def _run(self, aw: Awaitable[T]) -> T:
        return self._runner.run(aw)


class _SyncConnection(_Proxy):
    """A connection driven on its own event loop thread, closed with the loop."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(_LoopThread(), connection)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and stop its loop; a second close does nothing (its loop is gone)."""
        if self._runner.loop.is_closed():
            return
        try:
            self._run(self._target.close())
        finally:
            self._runner.stop()


class SyncClient(_SyncConnection):
    """The blocking twin of :class:`~waitgraph.sdk.client.Client` (same arguments, same methods)."""

    def __init__(self, endpoints: Sequence[str], token: TokenSource, **kwargs: Any) -> None:
        self.client = Client(endpoints, token, **kwargs)
        super().__init__(self.client)

    def session(self, agent_id: str, **kwargs: Any) -> SyncSession:
        return SyncSession(self._runner, self.client.session(agent_id, **kwargs))

    def submit(self, command: Command, **kwargs: Any) -> Outcome:
        return self._run(self.client.submit(command, **kwargs))

    def events(self, **kwargs: Any) -> Iterator[WatchedEvent]:
        """The resuming event stream as a blocking iterator."""
        stream = self.client.events(**kwargs)
        try:
            while True:
                try:
                    yield self._run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(stream.aclose())


class SyncOperatorClient(_SyncConnection):
    """The blocking twin of :class:`~waitgraph.sdk.operator.OperatorClient` (same arguments, same methods)."""

    def __init__(self, endpoints: Sequence[str], token: TokenSource, **kwargs: Any) -> None:
        self.client = OperatorClient(endpoints, token, **kwargs)
        super().__init__(self.client)


class SyncSession(_Proxy):
    """The blocking twin of :class:`~waitgraph.sdk.session.Session`."""

    def __init__(self, runner: _LoopThread, session: Session) -> None:
        super().__init__(runner, session)
        self.session = session
        self._local = threading.local()

    def __enter__(self) -> SyncSession:
        self._run(self.session.open())
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self.session.close())

    def _stack(self) -> list[SyncExecution]:
        stack: list[SyncExecution] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def execution(self, *args: Any, **kwargs: Any) -> SyncExecutionScope:
        return SyncExecutionScope(self, self.session.execution(*args, **kwargs))

    def accept(self, *args: Any, **kwargs: Any) -> SyncExecutionScope:
        return SyncExecutionScope(self, self.session.accept(*args, **kwargs))

    def handle(self, execution_id: str, **kwargs: Any) -> SyncExecution:
        return SyncExecution(self._runner, self.session.handle(execution_id, **kwargs))

    def current(self) -> SyncExecution:
        """The execution of the innermost ``with s.execution(...)`` of this thread."""
        stack = self._stack()
        if not stack:
            raise RuntimeError("no current execution in this thread: use `with s.execution(...)` or execution=")
        return stack[-1]

    def _resolve(self, execution: SyncExecution | None) -> SyncExecution:
        return execution if execution is not None else self.current()

    def waiting_for(self, target_id: str, *, execution: SyncExecution | None = None, **kw: Any) -> SyncWait:
        return self._resolve(execution).waiting_for(target_id, **kw)

    def holding(self, target_id: str, *, execution: SyncExecution | None = None, **kw: Any) -> SyncHolding:
        return self._resolve(execution).holding(target_id, **kw)

    def delegate(self, agent_id: str, *, execution: SyncExecution | None = None, **kw: Any) -> SyncDelegation:
        return self._resolve(execution).delegate(agent_id, **kw)


class SyncExecution(_Proxy):
    """The blocking twin of :class:`~waitgraph.sdk.session.Execution`."""

    def __init__(self, runner: _LoopThread, execution: Execution) -> None:
        super().__init__(runner, execution)
        self.execution = execution

    def waiting_for(self, target_id: str, **kw: Any) -> SyncWait:
        return SyncWait(self._runner, self.execution.waiting_for(target_id, **kw))

    def holding(self, target_id: str, **kw: Any) -> SyncHolding:
        return SyncHolding(self._runner, self.execution.holding(target_id, **kw))

    def delegate(self, agent_id: str, **kw: Any) -> SyncDelegation:
        return SyncDelegation(self._runner, self.execution.delegate(agent_id, **kw))


class SyncExecutionScope:
    def __init__(self, session: SyncSession, scope: ExecutionScope) -> None:
        self._session = session
        self._scope = scope

    def __enter__(self) -> SyncExecution:
        ex = SyncExecution(self._session._runner, self._session._run(self._scope.enter()))
        self._session._stack().append(ex)
        return ex

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        stack = self._session._stack()
        if stack:
            stack.pop()
        self._session._run(self._scope.exit(exc))


class _SyncScope(_Proxy):
    """A wait, holding or delegation entered without task cancellation (threads are woken by
    the SDK's own blocking calls instead)."""

    def __enter__(self) -> Any:
        self._run(self._target.enter(False))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self._run(self._target.exit(exc))


class SyncWait(_SyncScope):
    def __init__(self, runner: _LoopThread, wait: Wait) -> None:
        super().__init__(runner, wait)

    def resolved(self, timeout_s: float | None = None) -> str:
        reason: str = self._run(self._target.resolved(timeout_s))
        return reason


class SyncHolding(_SyncScope):
    def __init__(self, runner: _LoopThread, holding: Holding) -> None:
        super().__init__(runner, holding)


class SyncDelegation(_SyncScope):
    def __init__(self, runner: _LoopThread, delegation: Delegation) -> None:
        super().__init__(runner, delegation)

    def result(self, timeout_s: float | None = None) -> str:
        outcome: str = self._run(self._target.result(timeout_s))
        return outcome
