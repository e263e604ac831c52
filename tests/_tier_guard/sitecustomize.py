"""Loaded by Python children of a guarded unit test (this folder is put on their PYTHONPATH
by flowlake_tier_guard.Guard.child_env): the same guard, active for the whole child, which
reports to the log the test process reads. Does nothing in any other process, nor in a
child of another interpreter (Superset's virtualenv runs scripts of its own in the unit
tier; the guard's wrapping changed what one of them measured: tests/hub/test_superset_swap.py)."""
import os
import sys

if (os.environ.get("FLOWLAKE_TIER_GUARD_ACTIVE") == "1" and os.environ.get("FLOWLAKE_TIER_GUARD_LOG")
        and os.environ.get("FLOWLAKE_TIER_GUARD_PREFIX") == sys.prefix):
    try:
        from pathlib import Path

        import flowlake_tier_guard

        if flowlake_tier_guard.enabled():
            flowlake_tier_guard.Guard(Path(os.environ["FLOWLAKE_TIER_GUARD_LOG"]), in_child=True).install()
    except Exception as exc:  # never break a child for the guard's sake
        import sys

        print(f"flowlake tier guard not installed in child: {exc!r}", file=sys.stderr)
