"""What reading a config costs: the typed schema object built by walking the schema's type hints
(`trinity.config_schema.conform`, what every entry point runs) against OmegaConf's structured merge (the
schema merged with the config, then built as objects: how it was built before), measured alternately on the
same composed configs in one run; the validation of the ablation variants (each typed from one resolved copy
of the config, `trinity.config.resolved_variants`, against a copy of the whole OmegaConf tree per variant,
`ablation_variants`, as validation did before), alternating in one run; a composition with values not composed
before in the process (what a test or a flow with new overrides pays): Hydra composing the group choices once and
its override step setting the values (`trinity.config.compose`) against Hydra composing everything anew (how
compose worked before), alternating; and a whole `compose` + `validate` per experiment in a fresh process, as
every DVC stage, CLI command and test subprocess pays it.

    python benchmarks/config_load.py [--rounds 3] [--experiments local_small,local_agents,routing_benchmark,paper]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


COLD = """
import time
t = time.perf_counter()
from trinity import config
cfg = config.compose({overrides!r})
print(time.perf_counter() - t)
"""


def report(title: str, fast: tuple[str, list[float]], slow: tuple[str, list[float]], detail: str = "") -> None:
    """Medians of two ways timed alternately, in ms, and the slow one's ratio to the fast one."""
    f, s = statistics.median(fast[1]), statistics.median(slow[1])
    print(f"{title}, median of {len(fast[1])}{detail}:")
    print(f"  {fast[0]:36} {f * 1000:8.1f} ms")
    print(f"  {slow[0]:36} {s * 1000:8.1f} ms")
    print(f"  {'ratio':36} {s / f:8.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--experiments", default="local_small,local_agents,routing_benchmark,paper")
    args = ap.parse_args()
    from omegaconf import OmegaConf

    from trinity import config
    from trinity.config_schema import conform, omegaconf_reference

    experiments = [e for e in args.experiments.split(",") if e]
    containers = {e: OmegaConf.to_container(config.compose([f"experiment={e}"], validate_cfg=False), resolve=True)
                  for e in experiments}
    walk: list[float] = []
    merge: list[float] = []
    for _ in range(args.rounds):
        for e, container in containers.items():
            t = time.perf_counter()
            typed = conform(container)
            walk.append(time.perf_counter() - t)
            t = time.perf_counter()
            reference = omegaconf_reference(container)
            merge.append(time.perf_counter() - t)
            if typed != reference:
                raise SystemExit(f"experiment={e}: the schema walk and the structured merge disagree")
    report("typed config of one composed config", ("schema walk (conform)", walk),
           ("OmegaConf structured merge", merge),
           f" ({len(experiments)} experiments x {args.rounds} rounds, alternating)")
    resolved: list[float] = []
    copied: list[float] = []
    documents = {e: config.compose([f"experiment={e}", "ablations.enabled=true"], validate_cfg=False)
                 for e in experiments}
    for _ in range(args.rounds):
        for e, document in documents.items():
            t = time.perf_counter()
            fast = {n: conform(v) for n, v in config.resolved_variants(document).items() if v is not None}
            resolved.append(time.perf_counter() - t)
            t = time.perf_counter()
            slow = {n: conform(v) for n, v in config.ablation_variants(document).items()}
            copied.append(time.perf_counter() - t)
            if any(dataclasses.replace(fast[n], composed=None) != dataclasses.replace(slow[n], composed=None)
                   for n in fast):
                raise SystemExit(f"experiment={e}: the resolved variants and the copied ones disagree")
    report("the ablation variants of one config, typed (what validation checks)",
           ("from one resolved copy", resolved), ("a tree copy per variant", copied))
    split: list[float] = []
    whole: list[float] = []
    for i in range(args.rounds):
        for e in experiments:
            values = [f"experiment={e}", f"seed={100 + i}", f"evolve.sigma0=0.0{i + 1}", "protocol.max_turns=2"]
            t = time.perf_counter()
            ours = config.compose(values, validate_cfg=False)
            split.append(time.perf_counter() - t)
            t = time.perf_counter()
            theirs = config.pool_from_recording(config.hydra_composition(values))
            whole.append(time.perf_counter() - t)
            if OmegaConf.to_yaml(ours) != OmegaConf.to_yaml(theirs):
                raise SystemExit(f"{values}: the split composition and Hydra's whole one disagree")
    report("a composition with new values on composed group choices",
           ("groups once + Hydra's override step", split), ("Hydra's whole composition", whole))
    print("compose + validate in a fresh Python process (imports included), seconds:")
    for e in experiments:
        times = []
        for _ in range(args.rounds):
            out = subprocess.run([sys.executable, "-c", COLD.format(overrides=[f"experiment={e}"])], cwd=ROOT,
                                 capture_output=True, text=True, check=True)
            times.append(float(out.stdout.strip().splitlines()[-1]))
        print(f"  experiment={e:<20} median {statistics.median(times):.2f}  "
              f"(min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
