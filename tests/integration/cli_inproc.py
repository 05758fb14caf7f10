"""Run a `krafty` verb in this process, with the argv a user types: as a subprocess would, minus
the ~2 s a Python start and krafty's imports take on a loaded machine."""

from __future__ import annotations

import contextlib
import io
import sys
from types import SimpleNamespace


def krafty(*argv: str, stdin: str | None = None, check: int | None = 0):
    """``krafty ARGV`` -> SimpleNamespace(returncode, stdout, stderr)."""
    from krafty.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_in = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    out.buffer = _Bytes(out)  # (the console consumer writes bytes to sys.stdout.buffer)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdin = old_in
    p = SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())
    if check is not None:
        assert p.returncode == check, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


class _Bytes:
    def __init__(self, text: io.StringIO):
        self.text = text

    def write(self, b: bytes) -> int:
        self.text.write(b.decode("utf-8", "replace"))
        return len(b)

    def flush(self) -> None:
        pass
