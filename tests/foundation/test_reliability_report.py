"""scripts/reliability_report.py: a fast subset of its attacks, held to the goals of issues 14, 23, 24 and 35 (every
fault caught, every total 0), so CI keeps the report honest. The full report (``--json``) adds the command-line timing, more repetitions and
the kill-and-resume runs of the embedded engine (those are also tests of their own in tests/local_engine)."""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def report(load_script):
    return load_script("reliability_report.py")


def test_config_faults_are_all_clean_errors_before_a_model_loads(report):
    r = report.attack_config(timing=False)
    assert r["config_faults"] >= 32
    assert r["config_clean_errors"] == r["config_faults"]
    assert r["config_errors_after_model_load"] == r["config_silently_accepted"] == 0


def test_files_kills_and_writers(report):
    r = {**report.attack_library(byte_damages=10), **report.attack_replaced_files(),
         **report.attack_kills_mid_save(kills=2), **report.attack_concurrent_writers(saves=10)}
    assert r["damaged_library_files"] >= 30
    assert r["library_clean_errors"] == r["damaged_library_files"] and r["library_half_restored"] == 0
    assert r["replaced_files_refused"] == r["replaced_checkpoint_files"] == 3
    assert r["code_executed_on_resume"] is False
    assert r["unloadable_after_kill"] == 0 and r["concurrent_save_failures"] == 0


def test_fuzzed_outputs_workers_and_appworld(report):
    rng = random.Random(0)
    stepped, crashes = 0, 0
    for env_name, overrides in (("sokoban", {}), ("gym_cards/NumberLine-v0", {}),
                                ("webshop", {"webshop": {"num_products": 30}})):
        n, c = report.fuzz_env(env_name, 120, rng, **overrides)
        stepped, crashes = stepped + n, crashes + c
    n, c = report.fuzz_rollout_into_library(rng, iterations=2)
    assert stepped + n > 300 and crashes + c == 0
    workers, appworld = report.attack_workers(), report.attack_appworld()
    assert workers["worker_faults_contained"] == workers["worker_faults"] == 4
    assert appworld["appworld_attacks_contained"] == appworld["appworld_attacks"] == 4


def test_the_fuzzer_produces_what_broke_the_search_manager(report):
    rng = random.Random(1)
    texts = [report.fuzz_text(rng) for _ in range(400)]
    assert any(any(0xD800 <= ord(ch) <= 0xDFFF for ch in t) for t in texts)  # lone surrogates
    assert any("<action>" in t for t in texts) and any(len(t) > 1000 for t in texts)


def test_issue_23_attacks_are_all_caught(report):
    """Two runs on one folder, disk-full and read-only saves, escaping run paths, foreign folders, huge answers and
    observations, a faulty endpoint, markup in lessons, bad retrieval requests, a killed verl driver and a resumed
    verl metrics file (quick mode): no run lost, no traceback, no markup executed, no write outside the run folder."""
    r = report.issue_23_attacks(quick=True)
    assert report.issue_23_caught(r), r


def test_issue_24_readers_keep_hostile_text_inert(report):
    """The trajectory page and the library diff, fed scripts, handlers, terminal escapes and bad folders."""
    r = report.issue_24_attacks(quick=True)
    assert report.issue_24_caught(r), r


def test_issue_35_attacks_are_all_caught(report):
    """A received checkpoint or run folder (planted pickles, records naming another endpoint and a secret, an alias
    bomb, refused commands' records, output folders, damaged weights), bounded inputs (huge integers, deep lines,
    a huge next_id, malformed images), an endpoint answering garbage, trainers on a held folder, and the cluster
    script SIGKILLed on a fresh machine (quick mode): every attack caught, every total 0."""
    attacks = [a for a in report.ATTACKS if a.name not in ("issue_14_attacks", "issue_23_attacks", "issue_24_attacks")]
    r = report.run_attacks(attacks, quick=True)
    assert all(r["caught"].values()) and len(r["caught"]) == 11, r
    assert all(r[f"total_{total}"] == 0 for total in report.TOTALS), r
    assert r["checkpoint_code_attacks"] >= 5 and r["record_attacks"] >= 5 and r["cluster_runs"] == 1, r


def test_the_totals_add_the_counts_each_attack_names(report):
    from reliability_attacks import Attack

    def one(quick):
        return {"a_tracebacks": 2, "a_left": 1}

    def two(quick):
        return {"b_tracebacks": 1}

    attacks = [Attack(one, lambda r: True, {"tracebacks": ("a_tracebacks",), "processes_left": ("a_left",)}),
               Attack(two, lambda r: r["b_tracebacks"] == 0, {"tracebacks": ("b_tracebacks",)})]
    r = report.run_attacks(attacks, quick=True)
    assert r["caught"] == {"one": True, "two": False}
    assert (r["total_tracebacks"], r["total_processes_left"], r["total_hangs"]) == (3, 1, 0)
    assert not report.all_caught(r)


def test_json_output_is_the_report_alone_whatever_the_attacked_runs_print(report, monkeypatch, capsys):
    """An attacked run's console line (a taken-over lock, say) goes to stderr: ``--json`` prints one JSON line."""
    monkeypatch.setattr(report, "report", lambda quick: print("[slea-rl] run folder x: taking over the lock") or {"x": 1})
    monkeypatch.setattr(report, "all_caught", lambda r: True)
    assert report.main(["--json"]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == ['{"all_caught": true, "x": 1}']
    assert "taking over the lock" in printed.err
