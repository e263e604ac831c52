"""`flowlake lab`: the namespace labs (bulk-impact) and declared studies (`lab run`, `lab report`)."""
from flowlake.collectors.active.lab import lab
from .leftovers import clean_cmd
from .report import report_cmd
from .run import run_cmd

lab.add_command(run_cmd)
lab.add_command(report_cmd)
lab.add_command(clean_cmd)
