"""Lesson texts and cluster prototypes quote model output; the library viewer's Markdown export and console
view must show them as text. The export is rendered by two common Markdown libraries (Python-Markdown with
its table extension, markdown-it with raw HTML allowed) and the page is loaded in a real headless Chromium
with scripts in the lessons: nothing runs, no tag or link is formed, and every lesson reads as written. The
console view holds no control character (no ANSI/OSC escape reaches the terminal)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent_system.testing.browser import dump_dom
from recipe.forge.experience import ExperienceSystem
from recipe.forge.experience.library import Candidate
from recipe.forge.commands.library_viewer import main as viewer_main
from recipe.forge.safe_text import markdown_text, terminal_text

pytestmark = pytest.mark.timeout(300)

# every payload, when live, writes "PWNED-<n>" to the console
MARKUP = [
    '<script>console.log("PWNED-1")</script>',
    '<img src=x onerror="console.log(\'PWNED-2\')">',
    '<iframe srcdoc="<script>console.log(&quot;PWNED-3&quot;)</script>"></iframe>',
    '<svg onload="console.log(\'PWNED-4\')"></svg>',
    '[click me](javascript:console.log("PWNED-5")) and ![x](javascript:console.log("PWNED-6"))',
    '<javascript:console.log("PWNED-7")> &lt;b&gt; *bold* _it_ `code` | a cell | \\*',
    '<a href="javascript:console.log(\'PWNED-8\')">x</a> {: onclick="console.log(9)"} # not a heading',
]
ESCAPES = "clear \x1b[2J\x1b[H title \x1b]0;owned\x07 csi \x9b31m bell \x07 back\x08 cr\r bidi \u202eevil"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ALLOWED_TAGS = {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td"}


class Cells(HTMLParser):
    """The tags of a rendered page with their attributes, and the text of every table cell."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.cells, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        if tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def hostile_checkpoint(tmp_path_factory) -> Path:
    """A library whose lessons carry the markup and escape payloads, with a prototype that carries escapes."""
    from recipe.forge.config_schema import ForgeConfig

    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                      library_save_freq=1000, checkpoint_dir="unused"))
    levels = [("warning", "mistake"), ("warning", "pattern"), ("golden", "principle"), ("golden", "method")]
    texts = [*MARKUP, ESCAPES]
    system.library.insert_unchecked([Candidate(f"lesson {i}: {t}", *levels[i % len(levels)], 1.0 - i / 100)
                                     for i, t in enumerate(texts)], iteration=0)
    system.index.assign(f"room with {ESCAPES}", 0)
    folder = tmp_path_factory.mktemp("hostile") / "ck"
    system.save(folder)
    return folder


@pytest.fixture(scope="module")
def exported(hostile_checkpoint) -> str:
    out = hostile_checkpoint.parent / "library.md"
    assert viewer_main([str(hostile_checkpoint), "--export-md", str(out), "--quiet"]) == 0
    return out.read_text(encoding="utf-8")


def renderers():
    markdown = pytest.importorskip("markdown", reason="Python-Markdown is not installed (it comes with tensorboard)")
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is not installed (it comes with rich)")
    return {"python-markdown": lambda text: markdown.markdown(text, extensions=["tables", "attr_list"]),
            "markdown-it": lambda text: markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)}


def expected_cell(text: str) -> str:
    """How a lesson reads on the page: its controls shown as escapes, its whitespace collapsed."""
    return " ".join(terminal_text(text).split())


@pytest.mark.parametrize("name", ["python-markdown", "markdown-it"])
def test_the_rendered_export_holds_no_markup_from_lessons_and_reads_as_written(exported, name):
    page = Cells()
    page.feed(renderers()[name](exported))
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS, page.tags
    assert all(key in ("align", "style") for _, attrs in page.tags for key, _ in attrs), page.tags
    cells = {" ".join(c.split()) for c in page.cells}
    for i, text in enumerate([*MARKUP, ESCAPES]):
        assert expected_cell(f"lesson {i}: {text}") in cells, (text, cells)


def console_of(chromium: str, body_html: str, folder: Path) -> tuple[str, list[str]]:
    page = folder / "page.html"
    page.write_text(f"<html><head><meta charset='utf-8'></head><body>{body_html}</body></html>", encoding="utf-8")
    return dump_dom(chromium, page, folder / "profile")


def test_nothing_runs_when_the_rendered_export_is_opened_in_chromium(exported, chromium, tmp_path):
    render = renderers()["python-markdown"]
    unescaped = "| id | text |\n|---|---|\n" + "".join(f"| {i} | {t.replace('|', '&#124;')} |\n" for i, t in enumerate(MARKUP))
    (tmp_path / "raw").mkdir()
    _, live = console_of(chromium, render(unescaped), tmp_path / "raw")
    ran = {n for m in live for n in re.findall(r"PWNED-(\d)", m)}
    assert {"1", "2", "4"} <= ran, live  # the check can fail: the same lessons unescaped do run
    (tmp_path / "export").mkdir()
    dom, console = console_of(chromium, render(exported), tmp_path / "export")
    assert not any("PWNED" in m for m in console), console
    assert "javascript:" not in re.sub(r">[^<]*<", "><", dom)  # only ever inside text, never in a tag
    assert "lesson 0: &lt;script&gt;" in dom


def test_the_console_view_replaces_control_characters(hostile_checkpoint, capsys):
    assert viewer_main([str(hostile_checkpoint)]) == 0
    printed = capsys.readouterr().out
    assert not CONTROL.search(printed), repr(CONTROL.search(printed))
    assert "clear \\x1b[2J\\x1b[H title \\x1b]0;owned\\x07 csi \\x9b31m" in printed  # shown, not sent
    assert "bidi \\u202eevil" in printed
    assert "room with clear \\x1b[2J" in printed  # the cluster prototype too
    assert len([line for line in printed.splitlines() if line.startswith("    #")]) == len(MARKUP) + 1


def test_the_sanitizers_keep_text_and_remove_only_what_is_live():
    assert terminal_text("plain text: <b> & [x](y) ü 猫") == "plain text: <b> & [x](y) ü 猫"
    assert terminal_text("a\nb\tc\x1bd") == "a\\x0ab\\x09c\\x1bd"
    assert terminal_text("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"
    assert terminal_text("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert terminal_text(ValueError("bad \x1b[31m")) == "bad \\x1b[31m"
    assert markdown_text("a < b & c > d | e") == "a &lt; b &amp; c &gt; d &#124; e"
    assert markdown_text("[x](javascript:y)") == "\\[x\\]\\(javascript:y\\)"
