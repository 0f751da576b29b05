"""The packaged SmolLM2 folder loads without a warning: its tokenizer config says what transformers does with it."""

import json
import subprocess
import sys

from recipe.forge.hf.model_paths import ensure_smollm2_folder, without_space_cleanup


def test_a_folder_converted_by_an_older_version_loses_the_flag_transformers_ignores(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"clean_up_tokenization_spaces": True, "eos_token": "<|im_end|>"}))
    without_space_cleanup(config)
    assert json.loads(config.read_text()) == {"clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>"}
    before = config.stat().st_mtime_ns
    without_space_cleanup(config)  # already right: left as it is
    assert config.stat().st_mtime_ns == before


def test_loading_the_smollm2_tokenizer_prints_no_warning(tmp_path):
    folder = ensure_smollm2_folder()
    assert json.loads((folder / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"] is False
    code = "from recipe.forge.hf.model_loading import load_tokenizer; load_tokenizer('smollm2-135m-instruct')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "clean_up_tokenization_spaces" not in proc.stdout + proc.stderr
