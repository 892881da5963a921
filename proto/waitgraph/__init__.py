"""waitgraph protocol packages (generated code under v1/, see scripts/gen_proto)."""
