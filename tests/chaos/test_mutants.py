"""The mutant catalogue names code that exists: every entry's file is in the tree and each of its
edits stands there exactly once, so a refactor that moves the code a mutant plants into is caught
here, in seconds, instead of on the next ``scripts/mutants`` sweep (when the Raft layer became a
package, three entries still named ``cluster/node/raft.py``, and one had not matched since the
replica lock started counting writes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.mutants import CATALOGUE, REPO, Mutant, patched


@pytest.mark.parametrize("mutant", CATALOGUE, ids=[m.name for m in CATALOGUE])
def test_every_mutant_plants_into_the_tree_as_it_is(mutant: Mutant) -> None:
    path = REPO / mutant.file
    assert path.is_file(), f"{mutant.name}: {mutant.file} is not in the tree"
    text = path.read_text()
    assert patched(mutant, text) != text, f"{mutant.name}: its edits change nothing"


def test_a_mutant_whose_code_moved_fails_loudly(tmp_path: Path) -> None:
    moved = Mutant("moved", "node", "its text is gone", "x.py", (("old line\n", "new line\n"),))
    with pytest.raises(SystemExit, match="holds its patch text 0 times"):
        patched(moved, "something else\n")
    twice = Mutant("twice", "node", "its text is ambiguous", "x.py", (("a\n", "b\n"),))
    with pytest.raises(SystemExit, match="2 times"):
        patched(twice, "a\na\n")
