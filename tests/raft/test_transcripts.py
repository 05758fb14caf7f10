"""One transcript per rule of the Raft paper / KIP-595 (see tests/raft/transcript.py)."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.raft.transcript import run_transcript

DIR = pathlib.Path(__file__).parent / "transcripts"


@pytest.mark.parametrize("path", sorted(DIR.glob("*.txt")), ids=lambda p: p.stem)
def test_transcript(path):
    text = path.read_text()
    actual = run_transcript(text)
    if os.environ.get("REWRITE_TRANSCRIPTS"):
        path.write_text(actual)
        return
    assert actual == text
