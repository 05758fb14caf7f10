"""Simulation of the transaction coordinator under faults (world.py; ``python -m sim.txn.run``)."""
