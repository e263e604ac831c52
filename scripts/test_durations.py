"""Write tests/durations.json from a JUnit report of a whole `make test` run: the seconds
each test module took (its tests' setup, call and teardown). tests/conftest.py hands the
parallel workers the longest groups first by these figures, so short modules fill the end
of the run instead of a long one starting last.

    make test                              # writes test-output/junit.xml
    .venv/bin/python scripts/test_durations.py test-output/junit.xml
"""
from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_seconds(junit: Path) -> dict[str, float]:
    """{tests/.../test_x.py: seconds} from a pytest JUnit XML (classname tests.hub.test_x[.Class])."""
    took: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        # the module is the last part naming an existing file (a class may follow it)
        for n in range(len(parts), 0, -1):
            path = "/".join(parts[:n]) + ".py"
            if (REPO / path).is_file():
                took[path] += float(case.get("time") or 0)
                break
    return {m: round(s, 1) for m, s in sorted(took.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("junit", type=Path, help="JUnit XML of a whole run (make test writes test-output/junit.xml)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "durations.json")
    args = ap.parse_args(argv)
    if not args.junit.is_file():
        print(f"{args.junit}: no such file (run make test first)", file=sys.stderr)
        return 2
    took = module_seconds(args.junit)
    if not took:
        print(f"{args.junit}: no test cases of this checkout's modules in it", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(took, indent=1) + "\n")
    print(f"{args.out}: {len(took)} modules, {sum(took.values()) / 60:.1f} min of tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
