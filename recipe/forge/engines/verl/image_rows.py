"""What an iteration's training rows carry of their images, as ``forge/*`` metrics (a vision-language policy).

verl's agent-loop worker turns each row's ``multi_modal_data`` into ``multi_modal_inputs`` (the processor's
``pixel_values`` and ``image_grid_thw``), which its actor feeds the model in the old-log-prob pass, the reference
pass and the update. Per iteration, over the step rows:

* ``forge/rows_with_images``: rows whose inputs hold images;
* ``forge/image_tokens``: the image tokens those images make (each image's patch grid over the processor's
  spatial merge of patches into one token), which the rows' prompts hold as pad tokens.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from recipe.forge.hf.vision_inputs import image_token_count


def image_metrics(inputs: Sequence[Mapping[str, Any] | None], merge_size: int) -> dict[str, float]:
    """The ``forge/*`` image figures of the rows' ``multi_modal_inputs`` (None or {} for a row without images);
    ``merge_size``: the image processor's (``processor.image_processor.merge_size``)."""
    grids = [row["image_grid_thw"] for row in inputs if row and row.get("image_grid_thw") is not None]
    return {
        "forge/rows_with_images": float(len(grids)),
        "forge/image_tokens": float(sum(image_token_count(grid, merge_size) for grid in grids)),
    }
