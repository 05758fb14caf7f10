"""Deterministic simulation of one partition's transactional data plane (transactional
batches, markers, the last stable offset, the aborted-transaction index, KIP-890
verification, recovery, truncation and compaction) over the product's own ``Log``.

    python -m sim.txn_log.run --seeds 200
    python -m sim.txn_log.run --seeds 1 --start 42 --verbose   # replay one seed
"""
