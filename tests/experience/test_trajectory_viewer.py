"""``slea-rl-trajectories`` on a real dump: hand-made episodes written by the embedded engine's writer
(RolloutDump, with the shown entries of a real library), rendered as HTML and Markdown. The page holds one row
per step with what the episodes hold, its filters compare the rows' data attributes, entry ids link to the rows
of the library page, and model-written markup (a ``<script>``, an ``<img onerror>``) shows as text: in headless
Chromium nothing runs, no console message, the page is not blank and a filter preset in the URL hides rows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from agent_system.testing.browser import dump_dom, not_blank, open_page
from recipe.forge.runs.rollout_dump import RolloutDump, chat_prompt, shown_entries
from recipe.forge.experience import ExperienceSystem
from recipe.forge.commands.trajectory_viewer import main

pytestmark = pytest.mark.timeout(300)

SCRIPT = '<script>console.log("PWNED-1")</script>'
IMG = '<img src=x onerror="console.log(\'PWNED-2\')">'
HEADERS = ["pass", "iteration", "task", "episode", "turn", "observation", "experiences shown", "response",
           "action", "valid", "reward", "outcome"]  # no advantage column: the dumps record none


class Page(HTMLParser):
    """The step rows of the page (their data attributes and cell texts), every link, every element id."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows, self.links, self.ids, self.tags = [], [], set(), []
        self._cells = self._text = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a":
            self.links.append(attrs["href"])
        if tag == "tr" and "step" in attrs.get("class", "").split():
            self._cells = []
            self.rows.append({"attrs": attrs, "cells": self._cells})
        elif tag == "td" and self._cells is not None:
            self._text = []

    def handle_endtag(self, tag):
        if tag == "td" and self._text is not None:
            self._cells.append("".join(self._text))
            self._text = None
        elif tag == "tr":
            self._cells = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(the dump folder, the library checkpoint, the episodes of each (pass, iteration), the shown entries)."""
    from tests.experience.conftest import make_traj, run_iteration
    from recipe.forge.config_schema import ForgeConfig

    base = tmp_path_factory.mktemp("trajectories")
    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                      library_save_freq=1000, checkpoint_dir="unused"))
    for i in range(3):
        run_iteration(system, i, seed=40 + i)
    system.save(base / "ck")
    ids = [str(e.entry_id) for e in system.library.all_entries()][:2]
    assert len(ids) == 2
    won = make_traj("u0", "t0", "reach 3", [("Target: 3\nCurrent: 2", "+")], 1.0)
    lost = make_traj("u1", "t1", "reach <b>-1</b>", [("Target: -1\nCurrent: 0", "+"), ("Target: -1\nCurrent: 1", "")],
                     0.0, valid=[True, False])
    won.steps[0].experience_ids = (ids[0], ids[1])
    lost.steps[0].experience_ids = (ids[1], "999999")  # an entry the library no longer holds
    lost.steps[1].response_text = f"I will {SCRIPT} and {IMG}"
    val = make_traj("v0", "v0", "reach 3", [("Target: 3\nCurrent: 0", "+")], 0.0)
    dump = RolloutDump(base / "rollouts", chat_prompt)
    passes = {("train", 1): [won, lost], ("train", 2): [won], ("val", 0): [val]}
    for (name, iteration), trajectories in passes.items():
        dump.write(trajectories, iteration, shown_entries(trajectories, system.library),
                   None if name == "train" else name)
    entries = {e: (system.library.entries[int(e)].zone, system.library.entries[int(e)].level,
                   system.library.entries[int(e)].text) for e in ids}
    return base / "rollouts", base / "ck", passes, entries


@pytest.fixture(scope="module")
def rendered(run, tmp_path_factory):
    folder, checkpoint, _, _ = run
    out = tmp_path_factory.mktemp("out")
    assert main([str(folder), "--out", str(out), "--library", str(checkpoint)]) == 0
    return out


def test_one_row_per_step_with_what_the_episodes_hold(run, rendered):
    _, _, passes, entries = run
    page = parse((rendered / "trajectories.html").read_text(encoding="utf-8"))
    expected = []
    for (name, iteration), trajectories in passes.items():
        for t in trajectories:
            for n, s in enumerate(t.steps):
                expected.append({"pass": name, "iteration": str(iteration), "task": t.task, "episode": t.traj_uid,
                                 "turn": str(s.step), "observation": s.anchor_obs, "response": s.response_text,
                                 "action": s.action, "valid": "yes" if s.is_action_valid else "no",
                                 "reward": f"{s.reward:.4g}", "outcome": "success" if t.success else "failure",
                                 "first": n == 0})
    got = [{k: v for k, v in zip(HEADERS, row["cells"]) if k != "experiences shown"} for row in page.rows]
    # the task is shown on an episode's first row only
    assert got == [{k: (v if k != "task" or want["first"] else "") for k, v in want.items() if k != "first"}
                   for want in expected]
    for row, want in zip(page.rows, expected):  # the filters compare these
        assert {k: row["attrs"][f"data-{k}"] for k in ("task", "outcome", "pass", "iteration")} == \
            {k: want[k] for k in ("task", "outcome", "pass", "iteration")}
    shown = page.rows[0]["cells"][HEADERS.index("experiences shown")]
    for entry_id, (zone, level, text) in entries.items():
        assert f"[{entry_id}] {zone}/{level}: {text}" in shown
    assert "[999999] ?/?: no longer in the library" in page.rows[1]["cells"][HEADERS.index("experiences shown")]


def test_entry_ids_link_to_their_rows_on_the_library_page(run, rendered):
    _, _, _, entries = run
    links = parse((rendered / "trajectories.html").read_text(encoding="utf-8")).links
    library = parse((rendered / "library.html").read_text(encoding="utf-8"))
    assert sorted(set(links)) == sorted(f"library.html#entry-{e}" for e in entries)
    assert all(link.split("#")[1] in library.ids for link in links)


def test_the_markdown_shows_model_markup_as_text(rendered):
    import markdown

    text = (rendered / "trajectories.md").read_text(encoding="utf-8")
    assert "## train, iteration 1" in text and "## val, iteration 0" in text
    page = parse(markdown.markdown(text, extensions=["tables"]))
    assert not {"script", "img", "b", "a"} & set(page.tags), page.tags
    assert f"I will {SCRIPT} and {IMG}" in markdown.markdown(text, extensions=["tables"]).replace("&lt;", "<") \
        .replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")


def test_bad_input_is_one_error_line_or_a_skipped_line(run, tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "missing" in err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no dump file" in capsys.readouterr().err
    folder, _, passes, _ = run
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    good = (folder / "1.jsonl").read_text(encoding="utf-8")
    (damaged / "1.jsonl").write_text(good + json.dumps({"foo": 1}) + "\n" + good[:40] + "\n", encoding="utf-8")
    assert main([str(damaged), "--out", str(tmp_path / "o")]) == 0
    warnings = capsys.readouterr().err.splitlines()
    lines = len(good.splitlines())
    assert [w.split(": skipped")[0] for w in warnings] == [f"warning: {damaged / '1.jsonl'}:{lines + 1}",
                                                            f"warning: {damaged / '1.jsonl'}:{lines + 2}"]
    assert len(parse((tmp_path / "o" / "trajectories.html").read_text()).rows) == lines
    (damaged / "2.jsonl").write_text("".join(json.dumps({"input": "p", "output": "o", "score": 0.0, "gts": 1,
                                                         "step": 2, "uid": str(i)}) + "\n" for i in range(7)))
    assert main([str(damaged), "--out", str(tmp_path / "o")]) == 0  # verl's own training dump: one note
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 2 + 3 + 1 and warnings[-1] == f"warning: {damaged / '2.jsonl'}: 4 more lines skipped"


def test_the_module_runs_as_a_command(run, tmp_path):
    folder = run[0]
    done = subprocess.run([sys.executable, "-m", "recipe.forge.commands.trajectory_viewer", str(folder), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (tmp_path / "trajectories.html").stat().st_size > 0, done.stderr


def test_the_page_in_chromium_runs_nothing_from_the_model_and_filters(rendered, chromium, tmp_path):
    page = rendered / "trajectories.html"
    dom, shot, console = open_page(chromium, page, tmp_path)
    assert console == [], console  # no payload ran, and the filter script raised nothing
    assert not_blank(shot)
    assert "I will &lt;script&gt;console.log(\"PWNED-1\")&lt;/script&gt; and &lt;img" in dom
    assert len(parse(dom).rows) == 5 and all("hidden" not in row["attrs"] for row in parse(dom).rows)
    dom, console = dump_dom(chromium, page, tmp_path / "filtered", fragment="outcome=failure&pass=train")
    assert console == [], console
    shown = [row["cells"][HEADERS.index("episode")] for row in parse(dom).rows if "hidden" not in row["attrs"]]
    assert shown == ["t1", "t1"]
    assert ">2</span> of 5 steps shown" in dom


def test_a_dump_that_records_advantages_gets_the_column(run, tmp_path):
    folder = tmp_path / "rollouts"
    shutil.copytree(run[0], folder)
    for path in folder.rglob("*.jsonl"):
        path.write_text("".join(json.dumps({**json.loads(line), "advantage": 0.5}) + "\n"
                                for line in path.read_text().splitlines()))
    assert main([str(folder), "--out", str(tmp_path / "out")]) == 0
    page = parse((tmp_path / "out" / "trajectories.html").read_text(encoding="utf-8"))
    assert page.rows and all(row["cells"][-2] == "0.5" for row in page.rows)
    assert "| reward | advantage | outcome |" in (tmp_path / "out" / "trajectories.md").read_text(encoding="utf-8")

