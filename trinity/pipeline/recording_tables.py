"""The report's section on a recording's Verifiers and redos (trinity.record.verdicts), for runs that replay
a recording: how often each agent as the Verifier accepts right and wrong answers, per suite, and how often
a redo after a REJECT is right, with and without the rejected answer in view."""

from __future__ import annotations

from typing import Any

from trinity.config_schema import TrinityConfig
from trinity.config_schema.pool import AgentSetup
from trinity.record import store
from trinity.record.verdicts import redo_table, verifier_table


def _setups(cfg: TrinityConfig) -> dict[str, dict[str, Any]]:
    out = {}
    for name, model in cfg.pool.models.items():
        setup = model.setup or AgentSetup()
        out[str(name)] = {"verify": setup.verify, "redo": setup.redo}
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _interval(row: dict, key: str) -> str:
    if row[key] is None:
        return "-"
    return f"{_pct(row[key])} [{_pct(row[key + '_low'])}, {_pct(row[key + '_high'])}]"


def verifier_section(cfg: TrinityConfig) -> tuple[list[str], dict[str, Any]] | None:
    """(markdown lines, metrics) for the recording the run replays; None when it replays none."""
    replay = cfg.pool.replay
    if replay is None:
        return None
    nodes = store.open_recording(str(replay.recording), verify=False).nodes
    setups = _setups(cfg)
    verifiers = verifier_table(nodes)
    redos = redo_table(nodes, {a: s["redo"] for a, s in setups.items()})
    lines = ["## Verifiers and redos on the recording", "",
             "Every distinct review in the recorded trees (all splits): how often each agent as the Verifier "
             "accepts a right answer and a wrong one, with 95% Wilson intervals and n. A checking Verifier runs "
             "the answer on the task statement's own examples (and tests it writes) or solves the task anew and "
             "compares; it never sees a task's hidden tests or reference answer.", "",
             "| verifier | how it checks | suite | P(ACCEPT \\| right) | n right | P(ACCEPT \\| wrong) | n wrong |",
             "|---|---|---|---|---|---|---|"]
    metrics: dict[str, Any] = {}
    for row in verifiers.iter_rows(named=True):
        how = setups.get(row["verifier"], {}).get("verify") or "reads (the Verifier prompt)"
        lines.append(f"| {row['verifier']} | {how} | {row['suite']} | {_interval(row, 'accept_right')} | "
                     f"{row['n_right']} | {_interval(row, 'accept_wrong')} | {row['n_wrong']} |")
        metrics.setdefault(row["verifier"], {})[row["suite"]] = {
            "accept_right": row["accept_right"], "n_right": row["n_right"],
            "accept_wrong": row["accept_wrong"], "n_wrong": row["n_wrong"]}
    lines += ["", "Redos: each agent's answers given right after a REJECT (distinct requests), beside its first "
              "answers on the same items. `continue` reads the shared transcript, the rejected answer's idea "
              "included; `fresh` reads the task and the Verifier's reason; `anew` the task alone.", "",
              "| agent | redo | sees the rejected answer | redo accuracy | n redos "
              "| its first answers there | n items |",
              "|---|---|---|---|---|---|---|"]
    redo_metrics = {}
    for row in redos.iter_rows(named=True):
        lines.append(f"| {row['agent']} | {row['redo']} | {'yes' if row['sees_rejected_answer'] else 'no'} | "
                     f"{_pct(row['redo_accuracy'])} | {row['n_redos']} | {_pct(row['first_answer_accuracy'])} | "
                     f"{row['n_items']} |")
        redo_metrics[row["agent"]] = {k: row[k] for k in ("redo", "redo_accuracy", "n_redos",
                                                           "first_answer_accuracy", "n_items")}
    return lines, {"verifiers": metrics, "redos": redo_metrics}

