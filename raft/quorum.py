"""Quorum arithmetic: majorities and the offset a majority has durably replicated."""

from __future__ import annotations

from collections.abc import Collection, Mapping


def majority(n_voters: int) -> int:
    return n_voters // 2 + 1


def committed_offset(durable_end: Mapping[int, int], voters: Collection[int]) -> int:
    """The largest offset ``o`` such that a majority of ``voters`` durably hold every
    entry below ``o`` (unknown voters count as 0)."""
    ends = sorted((durable_end.get(v, 0) for v in voters), reverse=True)
    return ends[majority(len(ends)) - 1] if ends else 0


def has_majority(acks: Collection[int], voters: Collection[int]) -> bool:
    return len(set(acks) & set(voters)) >= majority(len(voters))


def lost(rejects: Collection[int], voters: Collection[int]) -> bool:
    """True when so many voters refused that a majority can no longer be reached."""
    return len(set(rejects) & set(voters)) > len(voters) - majority(len(voters))
