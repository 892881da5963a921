"""The waitgraph.v1 wire protocol: .proto sources and the generated Python (committed)."""
