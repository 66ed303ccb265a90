"""Agents: a pool entry is a model server plus its own setup.

One small model can be several agents that fail on different items: a short direct answer, a longer
step-by-step one, a program whose printed result is the answer. Each is a `pool.models.<name>` entry with
the same server (base_url or port; a local server is started once for all of them) and its own `setup`:

- `instructions.<role>`: text added at the END of the last user message when the agent plays that role;
  the role's system prompt keeps the protocol's rules (the <idea> tag, ACCEPT/REJECT). At the end rather
  than in the system prompt: measured on Qwen2.5-Coder-1.5B (GSM8K, MMLU and HumanEval items), "answer at
  once" in the system prompt was ignored (step-by-step prose up to the cap on 4 of 6 items) and followed
  after the task (16 tokens on a GSM8K item); and the role's system prompt and the transcript before it are
  then the same for every agent of a server, a prefix its prompt cache can serve.
- `max_tokens.<role>`: the agent's own output cap for the role; it wins over the protocol's cap.
- `tool`: a TOOLS name run on the agent's Worker replies (`python`: program of thought).
- `verify`: a CHECKS name, the agent's checking procedure as the Verifier: instead of a reply to the
  Verifier prompt, the procedure runs the answer under review in the code sandbox or solves the task anew
  and compares (trinity.episodes.checks holds the procedures; trinity.pool.verify_layer runs them); its
  verdict is still ACCEPT or REJECT with a reason. Two agents of one model with different procedures send
  different Verifier requests.
- `redo`: what its Worker turn after a REJECT sees (REDO_MODES): the shared transcript as any Worker
  (`continue`), or the task and the Verifier's reason without the rejected answer's thought (`fresh`), or
  the task alone (`anew`: the request of the agent's first turn, so a recording already holds it).

Everything that asks for a reply or looks one up (the pool client, the recorder, the recording's replay and
exact fitness) shapes the request through `agent_request`, so a recorded call and a live one are the same
request. The tool's name is part of the request's identity (`request_model`): two agents that send the
same messages but run different tools never share a reply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from trinity.config_schema.pool import AgentSetup
from trinity.pool.errors import PoolConfigError
from trinity.sandbox import SandboxLimits, SandboxResult, run_python

Messages = list[dict[str, str]]


class Endpoint(Protocol):
    """What a turn's request reads of its agent: a trinity.pool.providers.ModelEndpoint (which imports this
    module, so it is named here by what it has)."""

    @property
    def model_id(self) -> str: ...
    @property
    def temperature(self) -> float: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def setup(self) -> AgentSetup: ...

# The Verifier's checking procedures an agent's setup may name (`setup.verify`); each is implemented in
# trinity.episodes.checks.PROCEDURES under the same name.
CHECKS: dict[str, str] = {
    "resolve": "code: run the task statement's own examples on the answer; otherwise solve the task anew with "
               "the agent's own Worker setup and compare the final answers",
    "resolve_tests": "as resolve, and on code whose statement gives no example run tests the model writes from it",
}
VERIFY_TOOL = "verify:"   # the request's tool for a checking Verifier: "verify:<name>@<version>" (its identity)
# The procedures' version, part of a checking Verifier's identity: a verdict recorded by an earlier version is
# not replayed as this one's, and the recorder expands the items it was recorded on again (raise it whenever
# what a procedure reads or runs changes a verdict). 2: statements' examples in every form, begun test writer.
CHECKS_VERSION = 2


def verify_tool(name: str) -> str:
    """The request tool of a checking Verifier running procedure `name` (its identity in caches and recordings)."""
    return f"{VERIFY_TOOL}{name}@{CHECKS_VERSION}"


def verify_procedure(tool: str) -> str:
    """The procedure's name in a checking Verifier's request tool (verify_tool's inverse)."""
    return tool[len(VERIFY_TOOL):].split("@", 1)[0]
# What a `fresh` redo adds to the task: the Verifier's reason, never the rejected answer.
REDO_NOTE = ("A verifier rejected an earlier answer to this task, saying: {reason}\n"
             "Solve the task anew from the start.")


@dataclass(frozen=True)
class TurnContext:
    """What the turn protocol knows of a turn besides its messages, for the agent's setup to use: the task
    and the answer under review (a checking Verifier), the Worker request for the task alone (what turn 0
    sends: a re-solve, an `anew` redo), and the latest REJECT's reason while no Worker has answered since."""
    task: str
    answer: str | None
    fresh: tuple[dict[str, str], ...]
    fresh_max_tokens: int | None = None
    fresh_temperature: float | None = None
    fresh_sample: int = 0
    rejection: str | None = None


def check_tool(setup: AgentSetup, key: str) -> None:
    """The setup's tool is a TOOLS name (the schema cannot know the registry)."""
    if setup.tool is not None and setup.tool not in TOOLS:
        raise PoolConfigError(f"config key '{key}.tool': unknown agent tool {setup.tool!r}; "
                              f"known: {', '.join(sorted(TOOLS))}")
    if setup.verify is not None and setup.verify not in CHECKS:
        raise PoolConfigError(f"config key '{key}.verify': unknown checking procedure {setup.verify!r}; "
                              f"known: {', '.join(sorted(CHECKS))}")


@dataclass(frozen=True)
class AgentRequest:
    """What is sent for one turn of one agent: the messages, the output cap, and the tool run on the reply."""
    messages: Messages
    max_tokens: int | None
    tool: str | None


def redo_messages(mode: str, context: TurnContext) -> Messages:
    """A Worker's request after a REJECT under a `fresh` or `anew` setup: the task alone, with the
    Verifier's reason (fresh); the rejected answer and the transcript's thoughts are left out."""
    out = [dict(m) for m in context.fresh]
    if mode == "fresh" and context.rejection:
        last = max(i for i, m in enumerate(out) if m.get("role") == "user")
        note = REDO_NOTE.format(reason=context.rejection.strip()[:600])
        out[last]["content"] = out[last]["content"].rstrip() + "\n\n" + note
    return out


def agent_request(setup: AgentSetup, role: str | None, messages: Sequence[Mapping[str, str]],
                  max_tokens: int | None, context: TurnContext | None = None) -> AgentRequest:
    """The request an agent sends when it plays `role` (None: a call outside the turn protocol, such as a
    judge's, which the agent's setup does not touch). `context`: the turn's (the protocol gives it), which a
    redo setup and a checking Verifier read."""
    if role == "worker" and setup.redo != "continue" and context is not None and context.rejection is not None:
        messages = redo_messages(setup.redo, context)
    out = [dict(m) for m in messages]
    if role is None:
        return AgentRequest(out, max_tokens, None)
    if role == "verifier" and setup.verify is not None:
        return AgentRequest(out, max_tokens, verify_tool(setup.verify))
    extra = setup.instructions.get(role)
    if extra:
        last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
        if last is None:
            out.append({"role": "user", "content": extra.strip()})
        else:
            out[last]["content"] = out[last]["content"].rstrip() + "\n\n" + extra.strip()
    cap = setup.max_tokens.get(role, max_tokens)
    return AgentRequest(out, cap, setup.tool if role == "worker" else None)   # tools run on answers only


def request_model(model_id: str, tool: str | None) -> str:
    """The model part of a request's identity (cache key, recording hash): the tool joins the model id."""
    return str(model_id) if tool is None else f"{model_id}+tool:{tool}"


def recorded_request(ep: Endpoint, role: str | None, messages: Sequence[Mapping[str, str]], max_tokens: int | None,
                     temperature: float | None, context: TurnContext | None = None
                     ) -> tuple[str, Messages, float, int | None]:
    """(model key, messages, temperature, cap) of what the client sends for this turn of agent `ep` (a
    trinity.pool.providers.ModelEndpoint): the identity a recording files the reply under. The recorder and
    exact fitness read it here, so a recorded call and its lookup cannot drift apart."""
    req = agent_request(ep.setup, role, messages, max_tokens, context)
    t = ep.temperature if temperature is None else float(temperature)
    cap = ep.max_tokens if req.max_tokens is None else int(req.max_tokens)
    return request_model(ep.model_id, req.tool), req.messages, t, cap


# --------------------------------------------------------------------------------------- tools

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
PROGRAM_LIMITS = SandboxLimits(wall_s=10.0, cpu_s=5, memory_mb=1024, nproc=8, fsize_mb=1, nofile=64)
_OUTPUT_CHARS = 600
_RAN = re.compile(r"\n\nProgram (?:output|error):.*\Z", re.DOTALL)


def program_of(reply: str) -> str | None:
    """The last fenced Python block of a reply (an unclosed last fence counts: a cap may cut the closing one)."""
    blocks: list[str] = _FENCE.findall(reply)
    if blocks:
        return blocks[-1]
    opened = re.search(r"```[ \t]*(?:python|py|python3)[ \t]*\n(.*)$", reply, re.DOTALL | re.IGNORECASE)
    return opened.group(1) if opened else None


def python_tool(reply: str, run: Callable[[str], SandboxResult] | None = None) -> str:
    """Program of thought: run the reply's program in the sandbox; its last printed line is the answer.

    The reply gains the program's output and, when the program printed something, one closing line that
    states the answer in both common conventions (`The answer is X.` and `\\boxed{X}`), so whatever the
    model wrote before it, the graders read the printed result. A program that fails or prints nothing
    leaves the reply's own answer standing, with the error noted."""
    if _RAN.search(reply):
        return reply   # already run (a reply replayed through a server that was recorded with its tool)
    program = program_of(reply)
    if program is None or not program.strip():
        return reply
    result = (run or (lambda p: run_python(p, limits=PROGRAM_LIMITS)))(program)
    lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
    if not result.ok:
        why = "timed out" if result.timed_out else (result.stderr.strip().splitlines() or ["failed"])[-1]
        return f"{reply.rstrip()}\n\nProgram error: {why[:200]}"
    if not lines:
        return f"{reply.rstrip()}\n\nProgram output: (nothing printed)"
    shown = "\n".join(lines)[-_OUTPUT_CHARS:]
    answer = lines[-1][:200]
    return f"{reply.rstrip()}\n\nProgram output:\n{shown}\n\nThe answer is {answer}. \\boxed{{{answer}}}"


# name -> function(reply text) -> the reply the episode sees
TOOLS: dict[str, Callable[[str], str]] = {"python": python_tool}


def apply_tool(tool: str | None, reply: str) -> str:
    if tool is None:
        return reply
    try:
        return TOOLS[tool](reply)
    except KeyError:
        raise PoolConfigError(f"unknown agent tool {tool!r}; known: {', '.join(sorted(TOOLS))}") from None
