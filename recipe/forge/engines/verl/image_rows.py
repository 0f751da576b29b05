"""What an iteration's training rows carry of their images, as ``forge/*`` metrics (a vision-language policy).

verl's agent-loop worker turns each row's ``multi_modal_data`` into ``multi_modal_inputs`` (the processor's
``pixel_values`` and ``image_grid_thw``), which its actor feeds the model in the old-log-prob pass, the reference
pass and the update. Per iteration, over the step rows:

* ``forge/rows_with_images``: rows whose inputs hold images;
* ``forge/image_tokens``: the image tokens those images make (each image's patch grid over the processor's merge
  of 2 x 2 patches into one token), which the rows' prompts hold as pad tokens.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

MERGE = 4  # Qwen-VL's spatial merge: 2 x 2 patches make one image token


def image_metrics(inputs: Sequence[Mapping[str, Any] | None]) -> dict[str, float]:
    """The ``forge/*`` image figures of the rows' ``multi_modal_inputs`` (None or {} for a row without images)."""
    grids = [row["image_grid_thw"] for row in inputs if row and row.get("image_grid_thw") is not None]
    return {
        "forge/rows_with_images": float(len(grids)),
        "forge/image_tokens": float(sum(int(grid.prod(dim=-1).sum()) for grid in grids) // MERGE),
    }
