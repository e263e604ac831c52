"""`flowlake lab`: the namespace labs (bulk-impact) and declared studies (`lab run`)."""
from flowlake.collectors.active.lab import lab
from .run import run_cmd

lab.add_command(run_cmd)
