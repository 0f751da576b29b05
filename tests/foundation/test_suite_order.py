"""The suite's schedule: scripts/module_seconds.py sums a JUnit report per module, tests/module_seconds.json holds
those sums for modules that exist, and the collection puts the longest modules first (the order `make test` hands
them to its two workers), each module's tests together and in their own order."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.a.test_x" name="test_one" time="1.25" />
<testcase classname="tests.a.test_x.TestGroup" name="test_two" time="0.25" />
<testcase classname="tests.b.test_y" name="test_three" time="2.0" />
<testcase classname="tests.b.test_y" name="test_four[case]" time="0.04" />
</testsuite></testsuites>
"""


def module_seconds(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "module_seconds.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_report_is_summed_per_module_with_class_tests_in_their_module(tmp_path):
    (tmp_path / "report.xml").write_text(REPORT)
    result = module_seconds(str(tmp_path / "report.xml"), "--out", str(tmp_path / "seconds.json"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "seconds.json").read_text()) == {"tests/a/test_x.py": 1.5,
                                                                   "tests/b/test_y.py": 2.0}


@pytest.mark.parametrize("text, problem", [("not xml at all", "not a readable JUnit XML report"),
                                           ("<testsuites><testsuite/></testsuites>", "no test case")])
def test_a_report_that_is_not_one_is_refused_in_one_line(tmp_path, text, problem):
    (tmp_path / "report.xml").write_text(text)
    result = module_seconds(str(tmp_path / "report.xml"))
    assert result.returncode == 2 and problem in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_the_measured_modules_exist():
    measured = json.loads((REPO / "tests" / "module_seconds.json").read_text())
    assert measured and all(seconds >= 0 for seconds in measured.values())
    assert [module for module in measured if not (REPO / module).is_file()] == []


def suite_conftest():
    spec = importlib.util.spec_from_file_location("suite_conftest_under_test", REPO / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_longest_modules_come_first_each_whole_and_in_its_own_order():
    measured = json.loads((REPO / "tests" / "module_seconds.json").read_text())
    first, second, third = sorted(measured, key=measured.get, reverse=True)[:3]
    unmeasured = "tests/not_measured_yet/test_new.py"
    names = [(third, "a"), (unmeasured, "b"), (second, "c"), (first, "d"), (third, "e"), (first, "f"),
             (second, "g"), (unmeasured, "h")]
    items = [SimpleNamespace(path=REPO / module, name=name) for module, name in names]
    ordered = suite_conftest().slowest_modules_first(items)
    assert [item.name for item in ordered] == ["d", "f", "c", "g", "a", "e", "b", "h"]


def test_a_worker_of_two_computes_with_its_share_of_the_cores(monkeypatch):
    conftest = suite_conftest()
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert conftest.threads_per_worker() == 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    assert conftest.threads_per_worker() == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert conftest.threads_per_worker() is None
