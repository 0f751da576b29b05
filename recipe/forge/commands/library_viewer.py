"""``slea-rl-library``: inspect an experience-library checkpoint (zones -> levels -> entries, cluster statistics)
and export it as JSON, Markdown or HTML.

    slea-rl-library checkpoints/forge                       # print the library
    slea-rl-library ckpt --zone warning --top 5             # one zone, five entries per level
    slea-rl-library ckpt --export-json lib.json --export-md lib.md --export-html lib.html
    slea-rl-library diff A B                                # what changed between two checkpoints

The checkpoint is validated first (a damaged file is reported with what is wrong; exit status 2). Every entry
shows its verdict against the environment's expert (recipe/forge/experience/lesson_quality.py): ``right``,
``wrong`` or ``not checkable`` (no advice, or no expert where it was drawn), and every level its counts. Every
entry also shows how the training episodes shown it ended against the episodes at its clusters not shown it
(recipe/forge/experience/outcomes.py): ``shown: 3/4 (75%)``, ``same clusters, not shown: 1/4 (25%)`` and their
difference ``+50 pp``, ``-`` where a group has no episodes.
Lesson texts and prototypes quote model output: the console view and the Markdown export show them through
recipe/forge/safe_text.py (no terminal escape, no live markup), the HTML export escapes them as HTML.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from recipe.forge.experience import library_diff
from recipe.forge.experience.library import LEVELS
from recipe.forge.experience.store import CheckpointError, load_payload
from recipe.forge.experience.viewer import as_html, as_markdown, as_text, organise
from recipe.forge.safe_text import terminal_text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["diff"]:
        return library_diff.main(argv[1:])
    parser = argparse.ArgumentParser(prog="slea-rl-library", description=" ".join(__doc__.split("\n\n")[0].split()),
                                     epilog="slea-rl-library diff A B: what changed between two checkpoints "
                                            "(slea-rl-library diff --help)")
    parser.add_argument("checkpoint", help="checkpoint folder or experience_library.json")
    parser.add_argument("--zone", choices=list(LEVELS), help="show one zone only")
    parser.add_argument("--top", type=int, default=None, help="entries per level (default: all)")
    parser.add_argument("--export-json", type=Path)
    parser.add_argument("--export-md", type=Path)
    parser.add_argument("--export-html", type=Path)
    parser.add_argument("--quiet", action="store_true", help="do not print the library")
    args = parser.parse_args(argv)
    try:
        payload = load_payload(args.checkpoint)
    except CheckpointError as exc:
        print(f"error: {terminal_text(exc)}", file=sys.stderr)
        return 2
    view = organise(payload, args.zone, args.top)
    if args.export_json:
        args.export_json.write_text(json.dumps(view, indent=2, ensure_ascii=False), encoding="utf-8")
    if args.export_md:
        args.export_md.write_text(as_markdown(view), encoding="utf-8")
    if args.export_html:
        args.export_html.write_text(as_html(view), encoding="utf-8")
    if not args.quiet:
        print(as_text(view))
    return 0


if __name__ == "__main__":
    sys.exit(main())
