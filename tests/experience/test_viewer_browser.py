"""The library viewer's HTML export, opened in a real headless Chromium: the page renders what the library
holds, its screenshot is not blank, and the browser reports no console message (the page has no script, so
any message is a fault). Chromium comes from Debian's ``chromium`` package (``scripts/ensure_browser.sh``, run
by ``make test``); where it cannot be installed the browser tests skip and say why."""

from __future__ import annotations

import html

import pytest

from agent_system.testing.browser import not_blank, open_page
from recipe.forge.experience import ExperienceSystem
from recipe.forge.commands.library_viewer import main as viewer_main

pytestmark = pytest.mark.timeout(300)


def test_the_checks_catch_console_errors_and_blank_pages(chromium, tmp_path):
    """The two checks below can fail: a script error is reported, a blank page is recognised."""
    faulty = tmp_path / "faulty.html"
    faulty.write_text("<html><body><p>text</p><script>console.error('boom'); missingFunction();</script></body></html>")
    _, shot, console = open_page(chromium, faulty, tmp_path)
    assert any("boom" in m for m in console) and any("missingFunction" in m for m in console)
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body></body></html>")
    _, shot, console = open_page(chromium, blank, tmp_path)
    assert console == [] and not not_blank(shot)


def test_the_viewer_page_renders_in_a_real_browser(chromium, cfg, tmp_path, iterate):
    system = ExperienceSystem.from_config(cfg(golden_capacity_per_level=5, warning_capacity_per_level=5))
    for i in range(3):
        iterate(system, i, seed=40 + i)
    system.save(tmp_path / "ck")
    page = tmp_path / "library.html"
    assert viewer_main([str(tmp_path / "ck"), "--export-html", str(page)]) == 0
    dom, shot, console = open_page(chromium, page, tmp_path)
    assert console == [], console
    assert "<table" in dom and "Experience library" in dom
    for entry in system.library.all_entries():  # every entry's text is on the page, escaped as HTML
        assert html.escape(entry.text, quote=False) in dom or html.escape(entry.text) in dom
    assert not_blank(shot)
