"""Seconds per test module, from a pytest JUnit XML report: the order in which `make test` hands modules to its
worker processes (tests/module_seconds.json, read by tests/conftest.py: the longest modules start first).

Usage: python -m pytest tests --junitxml=report.xml ...
       python scripts/module_seconds.py report.xml [--out tests/module_seconds.json]

A module's seconds are the sum of its test cases' times (setup, call and teardown: pytest's default
junit_duration_report), rounded to 0.1 s; with --out the JSON is written there (modules sorted by name), else
printed. A report that is not a JUnit XML file, or that holds no test case, is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path


def module_of(classname: str, file: str | None) -> str:
    """The test module's path: the report's ``file`` attribute where pytest wrote one, else from the dotted
    classname (``tests.verl_engine.test_x.TestClass`` -> ``tests/verl_engine/test_x.py``)."""
    if file:
        return file
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    if not parts:
        raise ValueError(f"test case classname {classname!r} names no test module")
    return "/".join(parts) + ".py"


def module_seconds(report: Path) -> dict[str, float]:
    """``{module path: seconds}`` over every test case of the JUnit XML ``report``."""
    try:
        root = ElementTree.parse(report).getroot()
    except (ElementTree.ParseError, OSError) as error:
        raise ValueError(f"{report}: not a readable JUnit XML report ({error})") from None
    seconds: dict[str, float] = defaultdict(float)
    for case in root.iter("testcase"):
        seconds[module_of(case.get("classname", ""), case.get("file"))] += float(case.get("time", 0.0))
    if not seconds:
        raise ValueError(f"{report}: no test case in the report")
    return {module: round(value, 1) for module, value in sorted(seconds.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        seconds = module_seconds(args.report)
    except ValueError as error:
        print(f"module_seconds: {error}", file=sys.stderr)
        return 2
    text = json.dumps(seconds, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
