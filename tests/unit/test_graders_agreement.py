"""benchmarks/grader_agreement.py's pieces: its LaTeX table is well formed and a wrong return variant
changes the values. The script on a subset: tests/integration/test_graders_agreement_script.py."""


from graders_support import _module


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
