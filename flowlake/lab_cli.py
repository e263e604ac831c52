"""`flowlake lab`: the namespace labs (bulk-impact) and declared studies (`lab run`, `lab report`)."""
from flowlake.collectors.lab.leftovers import clean_cmd
from flowlake.collectors.lab.report import report_cmd
from flowlake.collectors.lab.run import run_cmd
from flowlake.impact_lab import lab

lab.add_command(run_cmd)
lab.add_command(report_cmd)
lab.add_command(clean_cmd)
