"""waitgraph's deterministic core: state, commands, apply, snapshot.

Imports only the standard library, msgpack and msgspec. No clock, randomness, I/O, logging, threads,
asyncio, grpc or pysyncobj (docs/design.md §1); ``scripts/check`` enforces it.
"""

from .codec import decode_envelope, encode_envelope
from .commands import Command, Envelope
from .machine import StateMachine
from .outcome import Outcome, Result
from .state import Limits, State

__all__ = [
    "Command",
    "Envelope",
    "Limits",
    "Outcome",
    "Result",
    "State",
    "StateMachine",
    "decode_envelope",
    "encode_envelope",
]
