"""python -m bench.fuzz {run,replay,record} ... (see each command's --help)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv.pop(0) if argv and not argv[0].startswith("-") else "run"
    if cmd == "record":
        from bench.fuzz.record import main as record_main
        return record_main(argv)
    if cmd in ("run", "replay"):
        from bench.fuzz.harness import main as harness_main
        return harness_main(argv if cmd == "run" else ["--replay", *argv])
    print(f"unknown command {cmd!r}: use run, replay or record", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
