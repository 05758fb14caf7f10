"""krafty's own protocol fuzzer: mutated real-client traffic and hand-built hostile record
batches against a memory-limited node, with its RSS, its log and a canary client watched.
See bench/fuzz/__main__.py for the commands and bench/README.md for what it checks."""
