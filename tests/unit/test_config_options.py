"""Every option file composes and validates: each `group=option` of conf/ (nested groups through the
options that use them) and each `experiment=X`. A broken option file fails here, not in a run."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from trinity import config

ROOT = config.conf_dir()


def _parents_using(group: str, subgroup: str) -> list[str]:
    """Options of `group` whose defaults list picks an option of `group/subgroup` (e.g. pool=simulated
    picks pool/profile); a nested option only composes through one of them."""
    out = []
    for f in sorted((ROOT / group).glob("*.yaml")):
        defaults = (yaml.safe_load(f.read_text()) or {}).get("defaults") or []
        if any(isinstance(d, dict) and subgroup in d for d in defaults):
            out.append(f.stem)
    return out


def _cases() -> list[list[str]]:
    cases = []
    for path in sorted(ROOT.rglob("*.yaml")):
        rel = path.relative_to(ROOT).with_suffix("")
        if len(rel.parts) == 1:   # config.yaml, the root
            continue
        group, leaf = "/".join(rel.parts[:-1]), rel.parts[-1]
        if len(rel.parts) == 2:
            cases.append([f"{group}={leaf}"])
            continue
        parent, subgroup = rel.parts[0], "/".join(rel.parts[1:-1])
        parents = _parents_using(parent, subgroup)
        assert parents, f"conf/{rel}.yaml: no {parent} option picks a {group} option in its defaults list"
        cases += [[f"{parent}={p}", f"{group}={leaf}"] for p in parents]
    return cases


CASES = _cases()


def test_every_option_file_has_a_case():
    covered = {o.split("=")[0] + "/" + o.split("=")[1] for case in CASES for o in case}
    files = {str(p.relative_to(ROOT).with_suffix("")) for p in ROOT.rglob("*.yaml") if p.parent != ROOT}
    assert files == covered
    assert {"experiment=local_small", "experiment=paper", "experiment=routing_benchmark"} <= {c[-1] for c in CASES}
    assert ["pool=simulated", "pool/profile=dominant"] in CASES and ["paths=default"] in CASES


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c) for c in CASES])
def test_option_composes_and_validates(overrides):
    cfg = config.compose(overrides)   # validates
    # every interpolation resolves and no mandatory value (???) is left
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_option_files_that_compose_a_sibling_only_hold_differences():
    """An option that composes another option of its group (defaults: [<sibling>, _self_]) sets only keys
    whose composed value differs from the sibling's: a repeated value would hide a later change."""
    checked = 0
    for path in sorted(ROOT.glob("*/*.yaml")):
        group = path.parent.name
        data = yaml.safe_load(path.read_text()) or {}
        siblings = [d for d in data.get("defaults") or [] if isinstance(d, str) and d != "_self_"]
        if group == "experiment":   # experiments are global packages: test_experiment_files_only_hold_differences
            continue
        for sibling in siblings:
            base = OmegaConf.to_container(config.compose(["~experiment", f"{group}={sibling}"],
                                                         validate_cfg=False)[group])
            own = {k: v for k, v in data.items() if k != "defaults"}
            _assert_differs(own, base, f"conf/{group}/{path.name}", f"{group}.")
            checked += 1
    assert checked >= 5   # evolve/random_search, evolve/reinforce, coordinator/qwen* (2), tasks/paper


def test_experiment_files_only_hold_differences():
    """An experiment sets only keys whose value differs from the groups it picks."""
    for path in sorted((ROOT / "experiment").glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        picks = [f"{k.removeprefix('override /')}={v}" for d in data.get("defaults") or [] if isinstance(d, dict)
                 for k, v in d.items()]
        siblings = [d for d in data.get("defaults") or [] if isinstance(d, str) and d != "_self_"]
        # an experiment built on another one (local_live on local_small) differs from that one
        start = [f"experiment={siblings[0]}"] if siblings else ["~experiment"]
        base = OmegaConf.to_container(config.compose([*start, *picks], validate_cfg=False))
        own = {k: v for k, v in data.items() if k != "defaults"}
        _assert_differs(own, base, f"conf/experiment/{path.name}")


# Mappings set as one value even where some entries repeat: split fractions must sum to 1.
WHOLE = {"tasks.splits"}


def _assert_differs(own: dict, base: dict, where: str, prefix: str = "") -> None:
    for key, value in own.items():
        dotted = f"{prefix}{key}"
        if dotted in WHOLE:
            assert value != base.get(key), f"{where}: {dotted} repeats the value it composes"
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _assert_differs(value, base[key], where, f"{dotted}.")
        else:
            assert key not in base or base[key] != value, f"{where}: {dotted} repeats the value it composes"

