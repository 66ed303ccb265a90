"""The examples a coding statement gives, read as runnable cases (trinity.episodes.statement_examples): every
form statements use becomes a case, what cannot be read without guessing becomes none, and a case runs in
the sandbox with the comparison the checks document."""

from __future__ import annotations

import pytest

from trinity.episodes.checks import run_cases, statement_examples
from trinity.episodes.statement_examples import examples, parameters


def _shown(code: str, function: str | None) -> list[str]:
    return [c.show() for c in examples(code, function)]


@pytest.mark.parametrize("line, case", [
    ("f(12, 15) == 14", "f(12, 15) == 14"),
    ("f(12, 15) = 14", "f(12, 15) == 14"),
    ("f('a b') ==> {'a': 1, 'b': 1}", "f('a b') == {'a': 1, 'b': 1}"),
    ("f(-12) => (1, 1)", "f(-12) == (1, 1)"),
    ("f(\"x.txt\") # => 'Yes'", "f('x.txt') == 'Yes'"),
    ("f(\"1x.dll\") # => 'No' (the name should start with a letter)", "f('1x.dll') == 'No'"),
    ('f("Hello world!") ➞ ["Hello", "world!"]', "f('Hello world!') == ['Hello', 'world!']"),
    ("f(1) -> True", "f(1) == True"),
    ("f([1, 3, 2, 0]) == 1 + 9 + 0 + 0 = 10", "f([1, 3, 2, 0]) == 10"),
    ("f('aBCdEf') returns 1", "f('aBCdEf') == 1"),
    ("f({'a': 1}) should return True.", "f({'a': 1}) == True"),
    ("assert f([1, 2]) == [2, 1]", "f([1, 2]) == [2, 1]"),
    ("f(3, 4, 5) == 6.00", "f(3, 4, 5) == 6.0"),
])
def test_a_call_and_its_value_on_one_line_is_a_case_in_every_form(line, case):
    assert _shown(f'def f(*a):\n    """Does f.\n    {line}\n    """\n', "f") == [case]


@pytest.mark.parametrize("line", [
    "f(n) = 1 + n / 2, if n is even.",           # a recurrence: n is no literal
    "f(3) = f(2) + f(1) + f(4)",                   # a working that names calls
    'f(["aaaaaaa", "bb"]) == ""aaaaaaa"',          # a quote out of place
    "g(1) == 2",                                   # another function
    "f(x=[1, 2]) == sorted(x)",                    # a value that is no literal
    "the result of f(1) is 2",                     # prose
])
def test_what_cannot_be_read_without_guessing_is_no_case(line):
    assert examples(f'def f(*a):\n    """Does f.\n    {line}\n    """\n', "f") == []


def test_doctest_examples_come_first_in_both_of_their_forms_and_repeats_are_dropped():
    code = ('def f(xs):\n    """Does f.\n    >>> f([1, 2])\n    [2, 3]\n    >>> f([]) == []\n\n'
            '    f([1, 2]) == [2, 3]\n    f([5]) == [6]\n    """\n')
    assert _shown(code, "f") == ["f([1, 2]) == [2, 3]", "f([]) == []", "f([5]) == [6]"]


def test_input_output_blocks_name_the_arguments_by_name_or_by_position():
    by_name = ('def maximum(arr, k):\n    """Top k.\n    Example 1:\n        Input: arr = [-3, -4, 5], k = 3\n'
               '        Output: [-4, -3, 5]\n    """\n')
    assert _shown(by_name, "maximum") == ["maximum(arr=[-3, -4, 5], k=3) == [-4, -3, 5]"]
    by_position = ('def max_fill(grid, capacity):\n    """Buckets.\n    Example 1:\n        Input: \n'
                   '            grid : [[0,0,1,0], [1,1,1,1]]\n            bucket_capacity : 1\n'
                   '        Output: 6\n\n    Constraints:\n        * 1 <= capacity <= 10\n    """\n')
    assert _shown(by_position, "max_fill") == ["max_fill([[0, 0, 1, 0], [1, 1, 1, 1]], 1) == 6"]
    # three names for two parameters: neither by name nor by position
    assert examples(by_position.replace("Output", "extra : 2\n        Output"), "max_fill") == []


def test_the_parameters_are_read_from_the_signature():
    assert parameters("def f(a, b=2, *c, d, **e) -> int:\n    pass\n", "f") == ["a", "b", "d"]
    assert parameters("def g(x):\n    pass\n", "f") == []


def test_the_statement_of_a_task_is_read_through_its_code_block():
    task = ("Complete the following Python function.\n\n```python\ndef iscube(a):\n    '''Cubes.\n"
            "    Examples:\n    iscube(1) ==> True\n    iscube(2) ==> False\n    '''\n```\n")
    assert [c.show() for c in statement_examples(task)] == ["iscube(1) == True", "iscube(2) == False"]


BF = ('Complete the following Python function.\n\n```python\ndef bf(a, b):\n    """Between.\n'
      '    bf("Jupiter", "Neptune") ==> ("Saturn", "Uranus")\n    bf("Mars", "Mars") ==> ()\n    """\n```\n')


def test_a_list_matches_a_tuple_of_the_same_items_and_numbers_match_within_a_relative_1e_6():
    cases = statement_examples(BF)
    as_list = "```python\ndef bf(a, b):\n    return ['Saturn', 'Uranus'] if a != b else []\n```"
    assert run_cases(BF, as_list, cases)[0]
    wrong = "```python\ndef bf(a, b):\n    return ('Uranus', 'Saturn') if a != b else ()\n```"
    passed, why = run_cases(BF, wrong, cases)
    assert not passed and "bf('Jupiter', 'Neptune') == ('Saturn', 'Uranus')" in why
    area = ("```python\ndef area(a):\n    '''Area.\n    area(2) == 12.566371\n    '''\n```\n")
    assert run_cases(area, "```python\nimport math\ndef area(a):\n    return math.pi * a * a\n```",
                     statement_examples(area))[0]
    assert not run_cases(area, "```python\ndef area(a):\n    return 3.14 * a * a\n```", statement_examples(area))[0]
