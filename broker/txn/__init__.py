"""The transaction coordinator: ``__transaction_state`` records (records.py), the pure state
machine and coordinator core (state.py), and its asyncio shell (coordinator.py, markers.py)."""
