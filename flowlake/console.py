"""The `flowlake` console script. `flowlake query` is tried on its fast path first
(flowlake/query/fast.py: no click import, ~0.02 CPU-s less per question); every other
command, and every query the fast path declines, goes to the click CLI (cli.py)."""
import sys


def run() -> None:
    if sys.argv[1:2] == ["query"]:
        from flowlake.query.fast import run as fast

        fast(sys.argv[2:])  # ends the process when it answered
    from flowlake.cli import run as cli

    cli()
