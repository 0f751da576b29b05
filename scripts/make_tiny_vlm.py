#!/usr/bin/env python
"""Write a tiny random vision-language model (Qwen2.5-VL or Qwen3-VL, built from a config, no download) as a Hugging
Face folder, for tests and CPU trials of the visual path (recipe/forge/hf/tiny_vlm.py says what is in
it). Prints the folder.

    python scripts/make_tiny_vlm.py --out models/tiny-qwen2.5-vl
    python scripts/make_tiny_vlm.py --out models/tiny-qwen3-vl --family qwen3_vl
"""

from __future__ import annotations

import argparse

from recipe.forge.hf.tiny_vlm import FAMILIES, save_tiny_vlm_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the folder to write (created if missing)")
    parser.add_argument("--family", choices=FAMILIES, default=FAMILIES[0],
                        help="the model family (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        print(save_tiny_vlm_dir(args.out, args.family, args.seed))
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
