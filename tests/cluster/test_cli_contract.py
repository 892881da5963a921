"""docs/cli.md's scripting contract, as a shell script would rely on it, against a live cluster.

The script below is written only from docs/cli.md ("The scripting contract"): exit codes 0 done,
1 not found or refused, 2 usage, 3 timed out; snake_case JSON; prefixes. It runs unchanged under
bash with the cluster's environment and prints one line per check; the test fails on any line
that is not ``ok``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster

SCRIPT = r"""
set -u
expect() {  # expect CODE -- command...: the command's exit status must be CODE
  want=$1; shift; shift
  "$@" >$TMP/wg-contract.out 2>$TMP/wg-contract.err; got=$?
  if [ "$got" = "$want" ]; then echo "ok $*"; else echo "FAIL($got, wanted $want) $*: $(cat $TMP/wg-contract.err)"; fi
}
json_has() {  # json_has EXPR: a Python expression over the parsed JSON of the last command's stdout
  "$PY" -c "import json,sys; d=json.load(open('$TMP/wg-contract.out')); sys.exit(0 if ($1) else 1)" \
    && echo "ok json $1" || echo "FAIL json $1: $(head -c 300 $TMP/wg-contract.out)"
}
expect 0 -- waitgraph status -o json;                      json_has "any(n['role'] == 'leader' for n in d['nodes'])"
expect 0 -- waitgraph mode;                                 # no argument: prints the mode
expect 0 -- waitgraph mode -o json;                         json_has "d['mode'] in ('shadow', 'auto-safe', 'auto')"
expect 0 -- waitgraph freeze --reason contract;             # applied
expect 0 -- waitgraph freeze --reason contract;             # already frozen: a NOOP that is not a refusal
expect 0 -- waitgraph export -o json;                       json_has "d['admission']['cluster_frozen'] == 'contract'"
expect 0 -- waitgraph export -o json
"$PY" "$TMP/helpers.py" snake "$TMP/wg-contract.out"
expect 0 -- waitgraph unfreeze;
expect 1 -- waitgraph explain d999;                         # not found
expect 1 -- waitgraph signature 0000000000000000;           # unknown on this replica
expect 1 -- waitgraph signature ab;                         # a prefix that matches nothing
expect 1 -- waitgraph vote ffff;                            # no such digest
expect 2 -- waitgraph --endpoints 127.0.0.1 status;         # an endpoint without a port
grep -q "has no port" $TMP/wg-contract.err && echo "ok names the endpoint" || echo "FAIL no port message"
expect 2 -- waitgraph freeze --reason x --wait-timeout 2;   # --wait-timeout needs --wait
expect 2 -- waitgraph status --timeout 3;                   # the old ambiguous option is gone
# a listener that accepts and never answers: the RPC deadline passes
"$PY" "$TMP/helpers.py" silent >$TMP/wg-contract.port &
silent=$!; sleep 0.5
expect 3 -- waitgraph explain d1 --rpc-timeout 1 --endpoints "127.0.0.1:$(cat $TMP/wg-contract.port)"
kill $silent
expect 0 -- waitgraph health
"""


HELPERS = """
import json, socket, sys, time

if sys.argv[1] == "snake":  # every key of the JSON document is snake_case
    keys = []
    json.load(open(sys.argv[2]), object_pairs_hook=lambda pairs: keys.extend(k for k, _ in pairs) or dict(pairs))
    bad = [k for k in keys if k != k.lower()]
    print("ok json keys are snake_case" if keys and not bad else f"FAIL camelCase keys {bad}")
elif sys.argv[1] == "silent":  # a listener that accepts and never answers
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    print(s.getsockname()[1], flush=True)
    time.sleep(60)
"""


@pytest.fixture
def cluster(local_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return local_cluster("contract")


@pytest.mark.timeout(180)
def test_a_script_written_against_the_contract_works(cluster: LocalCluster, tmp_path: Path) -> Any:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env.update(cluster.env(), PY=sys.executable, TMP=str(tmp_path), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    assert (bin_dir / "waitgraph").exists(), "the console script is installed beside the interpreter"
    (tmp_path / "helpers.py").write_text(HELPERS)
    done = subprocess.run(["bash", "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    lines = done.stdout.splitlines()
    assert len(lines) >= 20, done.stdout + done.stderr
    failed = [line for line in lines if not line.startswith("ok")]
    assert not failed, "\n".join(failed)
