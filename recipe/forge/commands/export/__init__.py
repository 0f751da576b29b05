"""``slea-rl export CHECKPOINT --out FOLDER`` (also ``python -m recipe.forge.commands.export``): a checkpoint of any engine
as one self-contained folder.

    FOLDER/
    ├── config.json, model.safetensors, generation_config.json   the policy as a plain Hugging Face model
    ├── tokenizer.json, tokenizer_config.json, chat_template.jinja its tokenizer
    ├── library.json, library.md                                  the experience library (slea-rl-library's views)
    ├── library/experience_library.json                           the library file itself (loadable by a run)
    └── manifest.json                                             engine, iteration, config, versions, evaluation

What the checkpoint holds, checked, and its model folder (full weights, a LoRA adapter merged into its base,
verl's FSDP shards through verl's model merger) come from the run's files (recipe/forge/runs/checkpoint_source.py,
policy_weights.py); here are ``manifest`` and ``cli`` (the atomic write and the command line). A prompt-only
checkpoint (``trainer.engine=api``) has no policy: its export holds the library and the manifest, which says so.
"""

from recipe.forge.commands.export.cli import export_checkpoint, main

__all__ = ["export_checkpoint", "main"]
