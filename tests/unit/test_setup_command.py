"""`trinity setup` once the backbone's Hugging Face folder exists (made by `make setup`): it names the folder and
converts nothing, without loading torch or transformers (every `make run` and `make test` runs it first)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SETUP = """
import json, sys
from trinity import cli
code = cli.main(["setup"])
print(json.dumps({"code": code, "loaded": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def test_setup_names_the_converted_backbone_without_loading_torch():
    from trinity import config
    from trinity.coordinator.backbone_files import converted_dir

    cfg = config.load(None, [])
    folder = converted_dir(cfg.paths.model_cache, str(cfg.coordinator.backbone.id))
    assert (folder / "config.json").is_file(), f"make setup converts the default backbone into {folder}"
    done = subprocess.run([sys.executable, "-c", SETUP], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "loaded": []}
    assert f"{cfg.coordinator.backbone.id}: {folder} (Hugging Face folder" in done.stdout
