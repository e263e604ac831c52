"""The `flowlake` console script. `flowlake query` is first handed to the warm query
server when the stack runs one (jobs/query/server.py: no start-up at all), then tried
on its fast path (jobs/query/fast.py: no click import, ~0.02 CPU-s less per
question); every other command, and every query both decline, goes to the click CLI (cli.py)."""
import sys


def run() -> None:
    if sys.argv[1:2] == ["query"]:
        from flowlake.jobs.query.server import try_server

        try_server(sys.argv[2:])  # ends the process when the server answered
        from flowlake.jobs.query.fast import run as fast

        fast(sys.argv[2:])  # ends the process when it answered
    from flowlake.cli import run as cli

    cli()
