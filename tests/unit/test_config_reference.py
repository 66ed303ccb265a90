"""docs/CONFIG.md documents every option of every config group, and is current with conf/."""

from pathlib import Path

from trinity.config import conf_dir
from trinity.config_reference import render

REPO = Path(__file__).resolve().parents[2]


def test_committed_reference_is_current():
    assert (REPO / "docs/CONFIG.md").read_text() == render(), (
        "docs/CONFIG.md is behind conf/: run `trinity config --reference > docs/CONFIG.md`")


def test_every_option_file_and_key_is_in_the_reference(tmp_path):
    text = render()
    for path in Path(conf_dir()).rglob("*.yaml"):
        assert f"conf/{path.relative_to(conf_dir())}" in text, path
    # a new option file shows up with its header and keys
    root = tmp_path / "conf"
    (root / "evolve").mkdir(parents=True)
    (root / "config.yaml").write_text("# root\nseed: 0\n")
    (root / "evolve" / "mine.yaml").write_text("# My optimiser.\nstrategy: mine   # registry key\nsigma0: 1\n")
    mine = render(root)
    assert "### `evolve=mine`" in mine and "My optimiser." in mine and "Sets: `strategy`, `sigma0`." in mine
