"""What a served reply's content is: the Worker's answer without the protocol's tags (visible_answer);
an earlier Worker answer when the final reply holds nothing else; when no Worker reply had any text
outside the tags, the latest <idea> (all a Worker said), else nothing. The trace keeps the raw final
answer and says which turn and which part are shown."""

from __future__ import annotations

import asyncio

import pytest
from scripted_pool import ScriptedPool
from serve_support import AGENTS, serve_cfg, steered

from trinity.episodes.parsing import visible_answer
from trinity.serve.request_episode import EpisodeRunner
from trinity.serve.schema import parse_chat_request
from trinity.serve.settings import ServeSettings


@pytest.mark.parametrize("reply, shown", [
    ("no tags at all\n", "no tags at all"),
    ("The answer is 42. <idea>multiply six by seven</idea>", "The answer is 42."),
    ("The answer is 42.\n\n<idea>multiply</idea>\n", "The answer is 42."),
    ("42<idea>x</idea>.", "42."),                                           # no space where there was none
    ("A\n<idea>x</idea>\nB", "A\nB"),                                      # a block line goes with its break
    ("A\n\n<idea>x</idea>\n\nB", "A\n\nB"),
    ("A <suggestion>check it</suggestion> B", "A B"),
    ("A <suggested_role>verifier</suggested_role> B", "A B"),
    ("A <Suggested-Role >worker</ suggested role> B", "A B"),              # the spellings the parser reads
    ("A < IDEA >x</Idea> B", "A B"),
    ("42 <idea>a <suggestion>b</suggestion> c</idea> done", "42 done"),    # nested
    ("42 <idea>a <suggestion>b</idea> c", "42 c"),                          # a close closes what it holds
    ("<idea>a <idea>b</idea> c</idea> d", "d"),                             # same tag nested
    ("42 <idea>cut by the token limit", "42"),                              # unclosed: the rest is hidden
    ("42 <idea>x</suggestion> y", "42"),                                    # a wrong close closes nothing
    ("42 </idea> tail", "42 tail"),                                         # a stray close goes alone
    ("<think>6*7, so 42</think>The answer is 42. <idea>x</idea>", "The answer is 42."),
    ("def f():\n    return 42\n<idea>return it</idea>\n", "def f():\n    return 42"),  # indentation kept
    ("<idea>only an idea</idea>", ""),
    ("<suggestion>s</suggestion>\n<suggested_role>worker</suggested_role>", ""),
    ("<think>still thinking", ""),
    ("", ""),
])
def test_visible_answer_removes_every_protocol_tag_and_its_content(reply, shown):
    assert visible_answer(reply) == shown


# ---------------------------------------------------------------------- through an episode
@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return serve_cfg("http://127.0.0.1:9/v1", tmp_path_factory.mktemp("cache"))  # the pool is scripted


def run(cfg, plan, script, *, answer_first=True, max_turns=None):
    pool = ScriptedPool(cfg.protocol, script)
    runner = EpisodeRunner(pool, list(AGENTS), cfg.protocol, steered(plan), root_seed=0, answer_first=answer_first)
    body = {"model": "trinity", "messages": [{"role": "user", "content": "What is 6*7?"}]}
    if max_turns is not None:
        body["trinity"] = {"max_turns": max_turns}
    result = asyncio.run(runner.run(parse_chat_request(body, ServeSettings.from_config(cfg)), "req-answers"))
    return result, pool


def test_the_answer_is_the_final_reply_without_tags_and_the_trace_keeps_it_raw(cfg):
    raw = "<think>six sevens</think>The answer is 42.\n<idea>multiply</idea>"
    result, _ = run(cfg, [("alpha", "worker"), ("beta", "verifier")], {"worker": raw, "verifier": "ACCEPT"})
    assert result.answer == "The answer is 42."
    assert result.trace["final_answer"] == raw
    assert (result.trace["answer_turn"], result.trace["answer_source"]) == (0, "reply")
    assert result.trace["end_reason"] == "accept"


def test_a_final_reply_of_only_tags_shows_the_latest_worker_answer_with_text(cfg):
    # alpha answers, beta's revision is only an idea, gamma accepts that revision
    plan = [("alpha", "worker"), ("beta", "worker"), ("gamma", "verifier")]
    script = {"worker": ["First answer: 42 <idea>a</idea>", "<idea>only an idea</idea>"], "verifier": "ACCEPT"}
    result, _ = run(cfg, plan, script)
    assert result.answer == "First answer: 42"
    assert (result.trace["answer_turn"], result.trace["answer_source"]) == (0, "reply")
    assert result.trace["final_answer"] == "<idea>only an idea</idea>"
    assert [t["role"] for t in result.trace["turns"]] == ["worker", "worker", "verifier"]


@pytest.mark.parametrize("answer_first", [True, False])
def test_replies_of_only_tags_show_the_latest_idea(cfg, answer_first):
    # what the embedded pool's 0.5B Worker does with a small output cap: an idea and nothing else
    plan = [("alpha", "worker"), ("beta", "worker"), ("gamma", "verifier")]
    script = {"worker": ["<idea>add them</idea>", "<idea>5</idea><suggestion>y</suggestion>"], "verifier": "ACCEPT"}
    result, _ = run(cfg, plan, script, answer_first=answer_first, max_turns=2)
    assert result.answer == "5" and not result.failed
    assert (result.trace["answer_turn"], result.trace["answer_source"]) == (1, "idea")
    assert result.trace["final_answer"] == "<idea>5</idea><suggestion>y</suggestion>"


def test_no_worker_reply_with_text_or_idea_gives_an_empty_answer_and_says_so(cfg):
    # the protocol as trained: the Verifier accepts a reply that holds nothing a person could read
    raw = "<think>5</think><suggestion>y</suggestion><suggested_role>worker</suggested_role>"
    result, _ = run(cfg, [("alpha", "worker"), ("beta", "verifier")], {"worker": raw, "verifier": "ACCEPT"},
                    answer_first=False)
    assert result.answer == "" and not result.failed and result.trace["end_reason"] == "accept"
    assert (result.trace["answer_turn"], result.trace["answer_source"]) == (None, None)
    assert result.trace["final_answer"] == raw
