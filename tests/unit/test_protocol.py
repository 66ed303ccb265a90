"""The turn protocol on scripted replies: parsing, every termination path, Thinker override."""

from __future__ import annotations

import asyncio

import pytest
from scripted_pool import Fail, ScriptedPool, ScriptedRouter

from trinity.config import compose, load
from trinity.config_schema.protocol import ProtocolConfig
from trinity.episodes.parsing import (
    ACCEPT,
    REJECT,
    extract_tag,
    normalize_role,
    parse_thinker,
    parse_verdict,
    strip_reasoning,
    worker_thought,
)
from trinity.episodes.protocol import SAMPLE_INDEX_RANGE, fill, run_episode, sample_index_for
from trinity.episodes.trace import END_REASONS, EpisodeId
from trinity.errors import ConfigError
from trinity.tasks.types import TaskItem

AGENTS = ["big", "small"]
CFG = ProtocolConfig(
    max_turns=5,
    collaboration_instructions="Work together.",
    worker_system="WORKER SYSTEM",
    thinker_system="THINKER SYSTEM",
    verifier_system="VERIFIER SYSTEM",
    temperature=0.1,
    max_tokens=64,
)
ITEM = TaskItem(suite="toy", item_id="q1", prompt="What is 2+2?", reference="4")


class Grader:
    def __init__(self, fail: bool = False):
        self.calls: list[str] = []
        self.fail = fail

    async def __call__(self, item: TaskItem, answer: str) -> float:
        self.calls.append(answer)
        if self.fail:
            raise RuntimeError("sandbox exploded")
        return 1.0 if item.reference in answer else 0.0


def run(choices, script, *, cfg=CFG, grader=None, repeat=0):
    router = ScriptedRouter(choices)
    pool = ScriptedPool(cfg, script)
    grader = grader or Grader()
    episode = EpisodeId(generation=0, candidate=3, item=ITEM.uid, repeat=repeat)
    trace = asyncio.run(run_episode(ITEM, router, pool, AGENTS, cfg, episode, 123, grader))
    assert trace.end_reason in END_REASONS
    return trace, router, pool, grader


# ---- parsing ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("<idea>carry the one</idea>", "carry the one"),
    ("<IDEA>  Upper case  </Idea>", "Upper case"),
    ("< idea >spaced</ idea >", "spaced"),
    ("answer 4\n<idea>cut off by the token limit", "cut off by the token limit"),
    ("echo: <idea>...</idea>\nreal: <idea>the real one</idea>", "the real one"),
    ("<idea>   </idea>", None),
    ("no tags at all", None),
    ("", None),
])
def test_extract_idea(text, expected):
    assert extract_tag(text, "idea") == expected


def test_unclosed_tag_stops_at_next_protocol_tag():
    text = "<suggestion>check the sign\n<suggested_role>verifier</suggested_role>"
    assert extract_tag(text, "suggestion") == "check the sign"
    assert extract_tag("<Suggested-Role> Worker </suggested-role>", "suggested_role") == "Worker"


def test_worker_thought_is_idea_or_whole_reply():
    assert worker_thought("The answer is 4.\n<idea>add</idea>") == "add"
    assert worker_thought("  The answer is 4.  ") == "The answer is 4."
    assert worker_thought("<think>maybe <idea>x</idea></think>The answer is 4.") == "The answer is 4."
    assert worker_thought("<think>only reasoning, cut off") == "<think>only reasoning, cut off"


def test_strip_reasoning():
    assert strip_reasoning("<think>a</think>b") == "b"
    assert strip_reasoning("hidden</think>shown") == "shown"
    assert strip_reasoning("shown<think>cut") == "shown"


@pytest.mark.parametrize("text, role", [
    ("worker", "worker"), (" Verifier ", "verifier"), ("**Worker.**", "worker"), ("the verifier", "verifier"),
    ("thinker", None), ("worker or verifier", None), ("", None), (None, None),
])
def test_normalize_role(text, role):
    assert normalize_role(text) == role


@pytest.mark.parametrize("reply, valid_role", [
    ("<suggestion>check units</suggestion><suggested_role>verifier</suggested_role>", "verifier"),
    ("<SUGGESTION> redo step 2 </SUGGESTION>\n<Suggested_Role> Worker </Suggested_Role>", "worker"),
    ("<suggestion>cut off\n<suggested_role>worker", "worker"),
    ("<suggestion>fine</suggestion>", None),                                   # role missing
    ("<suggested_role>worker</suggested_role>", None),                         # suggestion missing
    ("<suggestion>x</suggestion><suggested_role>thinker</suggested_role>", None),  # not worker|verifier
    ("<suggestion></suggestion><suggested_role>worker</suggested_role>", None),    # empty suggestion
    ("The answer is 4.", None),
])
def test_parse_thinker(reply, valid_role):
    advice = parse_thinker(reply)
    assert (advice.role if advice else None) == valid_role


@pytest.mark.parametrize("reply, verdict", [
    ("ACCEPT", ACCEPT),
    ("accept", ACCEPT),
    ("  \n Accept. The answer is right.", ACCEPT),
    ("**ACCEPT**", ACCEPT),
    ("# Accept", ACCEPT),
    ("`ACCEPT`", ACCEPT),
    ("Accept, though I nearly wanted to reject it", ACCEPT),   # starts with accept
    ("Verdict: ACCEPT", ACCEPT),                               # accept appears, reject does not
    ("I accept this answer.", ACCEPT),
    ("REJECT", REJECT),
    ("**REJECT** the sum is wrong", REJECT),
    ("Verdict: REJECT. I cannot accept it.", REJECT),          # both appear: unclear
    ("This is unacceptable.", REJECT),                         # no word starting with accept
    ("Looks fine to me.", REJECT),                             # unclear
    ("", REJECT),
    ("<think>I would accept</think>REJECT", REJECT),           # reasoning ignored
    ("<think>hmm, reject?</think>\nACCEPT", ACCEPT),
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) == verdict


# ---- config ----------------------------------------------------------------------------------------

def test_config_from_composed_hydra_config():
    cfg = compose()
    protocol = ProtocolConfig.from_config(cfg.protocol)
    assert protocol.max_turns == cfg.protocol.max_turns
    assert protocol.worker_system.startswith("You are the Worker")
    assert ProtocolConfig.from_config(protocol) is protocol


@pytest.mark.parametrize("override, key", [
    ({"max_turns": 0}, "max_turns"),
    ({"review_format": "Task: {query}"}, "review_format"),
    ({"thinker_system": " "}, "thinker_system"),
])
def test_config_errors_name_the_key(override, key):
    values = {"worker_system": "w", "thinker_system": "t", "verifier_system": "v", **override}
    with pytest.raises(ConfigError, match=key):
        ProtocolConfig.from_config(values)


def test_fill_leaves_other_braces_and_inserted_text_alone():
    assert fill("{query} -> {answer} {json}", query="{answer}", answer="a") == "{answer} -> a {json}"


# ---- termination paths -----------------------------------------------------------------------------

def test_accept_scores_current_answer():
    trace, _, pool, grader = run(
        [(0, "worker"), (1, "verifier")],
        {"worker": "It is 4.\n<idea>add</idea>", "verifier": "ACCEPT"},
    )
    assert trace.end_reason == "accept"
    assert trace.final_answer == "It is 4.\n<idea>add</idea>"   # the FULL reply is the answer
    assert trace.reward == 1.0 and trace.graded
    assert [t.role for t in trace.turns] == ["worker", "verifier"]
    assert [t.agent for t in trace.turns] == ["big", "small"]
    assert trace.turns[1].verdict == ACCEPT
    assert grader.calls == [trace.final_answer]
    assert pool.count == 2


def test_verifier_before_answer_ends_with_zero_and_no_call():
    trace, _, pool, grader = run([(0, "thinker"), (1, "verifier")], {
        "thinker": "no tags", "verifier": "ACCEPT",
    })
    assert trace.end_reason == "verifier_before_answer"
    assert trace.reward == 0.0 and not trace.graded and trace.final_answer is None
    assert trace.turns_used == 2 and trace.turns[1].called is False and trace.calls == 1
    assert pool.counts() == {("big", "thinker"): 1}
    assert grader.calls == []


def test_turn_limit_scores_current_answer_after_k_turns():
    trace, _, _, _ = run(
        [(0, "worker"), (1, "verifier"), (0, "thinker"), (1, "worker"), (0, "verifier")],
        {"worker": ["first: 5", "second: 4"], "verifier": ["REJECT", "REJECT"], "thinker": "no tags"},
    )
    assert trace.end_reason == "turn_limit" and trace.turns_used == 5   # thinker + rejects count
    assert trace.final_answer == "second: 4" and trace.reward == 1.0


def test_turn_limit_without_answer_is_zero():
    trace, _, _, grader = run([(0, "thinker")] * 5, {"thinker": "I refuse to use tags"})
    assert trace.end_reason == "turn_limit" and trace.reward == 0.0 and trace.final_answer is None
    assert grader.calls == []


def test_failed_calls_count_as_turns_and_change_nothing():
    trace, router, _, _ = run(
        [(0, "worker"), (1, "worker"), (0, "verifier"), (1, "verifier"), (0, "verifier")],
        {("big", "worker"): Fail(), ("small", "worker"): "4 <idea>i</idea>",
         ("big", "verifier"): [Fail(), "ACCEPT"], ("small", "verifier"): "REJECT"},
    )
    assert [t.ok for t in trace.turns] == [False, True, False, True, True]
    assert trace.turns[0].error == "http 500 after 3 retries"
    assert "Reference thought 1" not in router.transcripts[1]   # the failed worker added nothing
    assert trace.end_reason == "accept" and trace.turns_used == 5 and trace.reward == 1.0


def test_pool_failure_when_no_answer_because_calls_failed():
    trace, _, _, grader = run([(0, "worker"), (1, "thinker"), (0, "worker")], {"worker": Fail(), "thinker": Fail()},
                              cfg=ProtocolConfig(**{**CFG.__dict__, "max_turns": 3}))
    assert trace.end_reason == "pool_failure" and trace.reward == 0.0 and trace.turns_used == 3
    assert all(not t.ok for t in trace.turns) and grader.calls == []


def test_budget_exhausted_ends_episode_ungraded():
    trace, _, pool, grader = run(
        [(0, "worker"), (1, "worker"), (0, "verifier")],
        {"worker": ["4 <idea>i</idea>", Fail("budget: max_calls", budget_exhausted=True)], "verifier": "ACCEPT"},
    )
    assert trace.end_reason == "budget" and trace.turns_used == 2
    assert trace.reward == 0.0 and not trace.graded and grader.calls == []
    assert trace.final_answer == "4 <idea>i</idea>"
    assert trace.turns[1].error == "budget: max_calls"
    assert pool.count == 2
    assert trace.calls == 1 and trace.turns[1].refused   # the refused call sent no request


def test_a_failed_call_counts_as_a_call_and_the_turn_holds_its_call_result():
    trace, _, _, _ = run([(0, "worker"), (1, "worker")], {"worker": [Fail(), "4 <idea>i</idea>"]},
                         cfg=ProtocolConfig(**{**CFG.__dict__, "max_turns": 2}))
    assert trace.calls == 2 and not trace.turns[0].ok and not trace.turns[0].refused
    assert trace.turns[1].call is not None and trace.turns[1].call.text == "4 <idea>i</idea>"
    assert "call" not in trace.to_dict()["turns"][1]   # the serialised trace keeps its fields


def test_grader_crash_is_recorded_not_raised():
    trace, _, _, _ = run([(0, "worker"), (0, "verifier")], {"worker": "4", "verifier": "ACCEPT"},
                         grader=Grader(fail=True))
    assert trace.end_reason == "accept" and trace.reward == 0.0 and not trace.graded
    assert trace.error == "grader: RuntimeError: sandbox exploded"


def test_router_bug_raises():
    with pytest.raises(ValueError, match="agent index 7"):
        run([(7, "worker")], {"worker": "4"})
    with pytest.raises(ValueError, match="role 'boss'"):
        run([(0, "boss")], {"worker": "4"})


# ---- Thinker ---------------------------------------------------------------------------------------

def test_thinker_role_overrides_next_turn_but_not_agent():
    trace, _, pool, _ = run(
        [(0, "worker"), (0, "thinker"), (1, "worker")],
        {"worker": "4", "thinker": "<suggestion>check it</suggestion><suggested_role>verifier</suggested_role>",
         "verifier": "ACCEPT"},
    )
    last = trace.turns[2]
    assert (last.role, last.router_role, last.role_from_thinker, last.agent) == ("verifier", "worker", True, "small")
    assert trace.turns[1].suggested_role == "verifier"
    assert trace.end_reason == "accept"
    assert pool.calls[-1].role == "verifier"


def test_thinker_suggestion_reaches_only_the_next_worker():
    trace, router, pool, _ = run(
        [(0, "worker"), (1, "thinker"), (0, "verifier"), (1, "worker"), (0, "thinker")],
        {"worker": ["5", "4 <idea>fixed</idea>", "4"],
         "thinker": ["<suggestion>recount the apples</suggestion><suggested_role>worker</suggested_role>", "none"]},
    )
    assert [t.role for t in trace.turns] == ["worker", "thinker", "worker", "worker", "thinker"]
    assert [t.role_from_thinker for t in trace.turns] == [False, False, True, False, False]
    workers = [c for c in pool.calls if c.role == "worker"]
    assert "recount the apples" in workers[1].messages[1]["content"]
    assert "Suggestion from a Thinker" in workers[1].messages[1]["content"]
    assert "recount the apples" not in workers[2].messages[1]["content"]
    assert all("recount" not in t for t in router.transcripts)   # thinker output never joins the transcript


def test_invalid_thinker_reply_is_discarded():
    trace, _, pool, _ = run(
        [(0, "worker"), (0, "thinker"), (1, "worker")] + [(0, "worker")] * 2,
        {"worker": "4", "thinker": "<suggestion>check</suggestion> I think a verifier should look"},
    )
    assert trace.turns[1].suggested_role is None
    assert trace.turns[2].role == "worker" and not trace.turns[2].role_from_thinker
    assert "check" not in pool.calls[2].messages[1]["content"]


def test_thinker_and_verifier_see_query_and_current_answer():
    _, _, pool, _ = run(
        [(0, "thinker"), (0, "worker"), (1, "verifier")],
        {"thinker": "nothing", "worker": "It is 4.", "verifier": "REJECT"},
        cfg=ProtocolConfig(**{**CFG.__dict__, "max_turns": 3}),
    )
    thinker, _, verifier = pool.calls
    assert thinker.messages == [
        {"role": "system", "content": "THINKER SYSTEM"},
        {"role": "user", "content": "Task:\nWhat is 2+2?\n\nCurrent answer:\n(no answer yet)"},
    ]
    assert verifier.messages[1]["content"] == "Task:\nWhat is 2+2?\n\nCurrent answer:\nIt is 4."
    assert "Work together." not in verifier.messages[1]["content"]


# ---- shared message, pool calls --------------------------------------------------------------------

def test_shared_message_grows_with_numbered_thoughts():
    trace, router, pool, _ = run(
        [(0, "worker"), (1, "worker"), (0, "thinker"), (1, "worker"), (0, "worker")],
        {"worker": ["Try 5.\n<Idea>count fingers</Idea>", "No idea tag here, answer 4", "<idea>", "4 <idea>sum"],
         "thinker": "no tags"},
    )
    base = "What is 2+2?\n\nWork together."
    t1 = base + "\n\nReference thought 1:\ncount fingers"
    t2 = t1 + "\n\nReference thought 2:\nNo idea tag here, answer 4"
    t4 = t2 + "\n\nReference thought 3:\n<idea>"   # an empty idea counts as missing: whole reply
    assert router.transcripts == [base, t1, t2, t2, t4]
    workers = [c for c in pool.calls if c.role == "worker"]
    assert [w.messages[1]["content"] for w in workers] == [base, t1, t2, t4]
    assert all(w.messages[0] == {"role": "system", "content": "WORKER SYSTEM"} for w in workers)
    assert trace.final_answer == "4 <idea>sum"


def test_pool_calls_carry_sampling_settings_and_accounting():
    trace, _, pool, _ = run([(0, "worker"), (1, "verifier")], {"worker": "four 4", "verifier": "ACCEPT"})
    assert {(c.max_tokens, c.temperature) for c in pool.calls} == {(64, 0.1)}
    assert trace.completion_tokens == 3 and trace.prompt_tokens > 0 and trace.cost_usd > 0
    assert trace.turns[0].reply is None   # record_replies is off


def test_sample_index_from_item_repeat_turn_only():
    trace, _, pool, _ = run([(0, "worker"), (1, "worker"), (0, "verifier")],
                            {"worker": "4", "verifier": "ACCEPT"}, repeat=2)
    expected = [sample_index_for(ITEM.uid, 2, turn) for turn in range(3)]
    assert [c.sample_index for c in pool.calls] == expected == [t.sample_index for t in trace.turns]
    assert len(set(expected)) == 3 and all(0 <= s < SAMPLE_INDEX_RANGE for s in expected)
    assert sample_index_for(ITEM.uid, 0, 0) != sample_index_for(ITEM.uid, 1, 0)
    assert sample_index_for(ITEM.uid, 0, 0) == sample_index_for(ITEM.uid, 0, 0)


def test_record_replies_keeps_text():
    cfg = ProtocolConfig(**{**CFG.__dict__, "record_replies": True})
    trace, _, _, _ = run([(0, "worker"), (1, "verifier")], {"worker": "4", "verifier": "ACCEPT"}, cfg=cfg)
    assert [t.reply for t in trace.turns] == ["4", "ACCEPT"]
    assert trace.to_dict()["turns"][1]["verdict"] == ACCEPT


def test_empty_worker_reply_is_an_answer_but_not_a_thought():
    trace, router, _, _ = run([(0, "worker"), (1, "worker"), (0, "verifier")],
                              {"worker": ["  ", "4"], "verifier": "REJECT"},
                              cfg=ProtocolConfig(**{**CFG.__dict__, "max_turns": 3}))
    assert router.transcripts[1] == "What is 2+2?\n\nWork together."
    assert "Reference thought 1:\n4" in router.transcripts[2]


def test_composed_config_drives_an_episode():
    protocol = load().protocol
    router = ScriptedRouter([(0, "worker"), (0, "verifier")] + [(0, "worker")] * 10)
    pool = ScriptedPool(protocol, {"worker": "4", "verifier": "**ACCEPT**"})
    trace = asyncio.run(run_episode(ITEM, router, pool, AGENTS, protocol, EpisodeId(-1, -1, ITEM.uid), 0, Grader()))
    assert trace.end_reason == "accept" and trace.reward == 1.0
    assert pool.calls[0].messages[0]["content"] == protocol.worker_system


# ---- output caps per role and suite ------------------------------------------------------------------

def test_caps_per_role_and_suite_reach_the_pool():
    import dataclasses

    cfg = dataclasses.replace(CFG, max_tokens={"worker": {"default": 200, "toy": 111}, "thinker": 48, "verifier": 8})
    cfg = ProtocolConfig.from_config(dataclasses.asdict(cfg))   # through validation, as a config file would
    trace, _, pool, _ = run([(0, "thinker"), (0, "worker"), (1, "verifier")], {
        "thinker": "<suggestion>check</suggestion><suggested_role>worker</suggested_role>",
        "worker": "4 <idea>add</idea>", "verifier": "ACCEPT"}, cfg=cfg)
    assert [(c.role, c.max_tokens) for c in pool.calls] == [("thinker", 48), ("worker", 111), ("verifier", 8)]
    assert cfg.max_tokens_for("worker", "other") == 200
    assert cfg.max_tokens_for("worker") == 200


@pytest.mark.parametrize("caps, expected", [
    (None, {"worker": None, "thinker": None}),
    (64, {"worker": 64, "thinker": 64}),
    ({"worker": 300}, {"worker": 300, "thinker": None}),
    ({"worker": {"toy": 90}}, {"worker": 90, "thinker": None}),
])
def test_cap_forms(caps, expected):
    cfg = ProtocolConfig.from_config({**{k: getattr(CFG, k) for k in ("worker_system", "thinker_system",
                                                                    "verifier_system")}, "max_tokens": caps})
    assert {role: cfg.max_tokens_for(role, "toy") for role in expected} == expected


@pytest.mark.parametrize("caps, key", [
    ({"writer": 10}, "protocol.max_tokens"),
    ({"worker": 0}, "protocol.max_tokens.worker"),
    ({"worker": {"gsm8k": "many"}}, "protocol.max_tokens.worker.gsm8k"),
    (-5, "protocol.max_tokens"),
])
def test_bad_caps_name_the_key(caps, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ProtocolConfig.from_config({**{k: getattr(CFG, k) for k in ("worker_system", "thinker_system",
                                                                  "verifier_system")}, "max_tokens": caps})


def test_the_turn_rules_step_by_step():
    """TurnState: the rules run_episode, the recording tree and trinity plan share."""
    from trinity.episodes.protocol import REPLY_OUTCOMES, TurnState

    start = TurnState()
    assert start.role("verifier") == "verifier" and start.end_before_call("verifier") == "verifier_before_answer"
    assert start.end_before_call("thinker") is None and start.end_before_call("worker") is None
    answered, end = start.after_reply("worker", "answer")
    assert (answered, end) == (TurnState(answers=1), None) and answered.end_before_call("verifier") is None
    advised, _ = answered.after_reply("thinker", "advise_verifier")
    assert advised.role("worker") == "verifier"          # the advice overrides the router's role
    assert advised.after_failed_call() == TurnState(answers=1)   # a failed call uses the advice up
    assert answered.after_reply("thinker", "no_advice") == (TurnState(answers=1), None)
    assert answered.after_reply("verifier", "accept") == (TurnState(answers=1), "accept")
    assert answered.after_reply("verifier", "reject") == (TurnState(answers=1), None)
    assert answered.after_reply("worker", "answer")[0].answers == 2
    for role, outcomes in REPLY_OUTCOMES.items():
        with pytest.raises(ValueError, match="has no outcome"):
            start.after_reply(role, "nosuch")
        assert all(start.after_reply(role, o) is not None for o in outcomes)


# ---- protocol.rejection_note: what the coordinator reads after a rejected Verifier --------------------

@pytest.mark.parametrize("note", [None, "Verifier rejection {n}: the current answer was rejected."])
def test_a_rejection_note_reaches_the_router_only(note):
    import dataclasses

    cfg = dataclasses.replace(CFG, max_turns=4, rejection_note=note)
    script = {"worker": ["first try <idea>guess</idea>", "The answer is 4 <idea>add</idea>"],
              "verifier": ["REJECT: wrong", "REJECT: still unsure"]}
    trace, router, pool, _ = run([(0, "worker"), (1, "verifier"), (0, "worker"), (1, "verifier")], script, cfg=cfg)
    seen = router.transcripts
    assert len(seen) == 4 and [t.verdict for t in trace.turns if t.role == "verifier"] == [REJECT, REJECT]
    if note is None:   # the paper: a rejection leaves what the router reads unchanged
        assert seen[2] == seen[1]
    else:
        assert seen[2] == seen[1] + "\n\nVerifier rejection 1: the current answer was rejected."
        assert seen[3].endswith("Verifier rejection 1: the current answer was rejected.\n\nReference thought 2:\nadd")
    # pool models never see it: the second Worker gets the shared message of thoughts alone
    second_worker = [c for c in pool.calls if c.role == "worker"][1]
    assert "rejection" not in second_worker.messages[-1]["content"]
    assert "Reference thought 1:\nguess" in second_worker.messages[-1]["content"]
