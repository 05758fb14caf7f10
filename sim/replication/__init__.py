"""Deterministic simulation of one partition's replication (ISR, HW, leader epochs,
KIP-101/279 truncation) over the pure cores in ``broker/replica``.

    python -m sim.replication.run --seeds 200            # swarm: RF 3 or 5, rates per seed
    python -m sim.replication.run --seeds 1 --start 42 --verbose   # replay one seed
    python -m sim.replication.run --seeds 600 --no-unclean-shutdown-detection  # pre KIP-966

``world.py`` holds the scheduler, network, brokers, producer and invariant checker
(its docstring says exactly when a lost write is permitted); ``controller.py`` the
controller model; ``simlog.py`` the log model on the simulated disk of ``sim/disk.py`` (unflushed
tails lost, tails torn after a clean stop, bad blocks).
"""
