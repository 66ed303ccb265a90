"""Which process group listens on a loopback TCP port (Linux: /proc), to tell a server we started from
another that answers on the same port.

A free port found by binding and releasing it can be taken by another process before the server we start
binds it (two `trinity run`s at once both find 4200 free). The loser's server then fails to bind, while its
health check is answered by the winner's server, and the run would use a server that stops with the other
run. `listens(group, port)` settles it: True when a process of the group holds a listening socket on the
port, False when none does, None where the system cannot tell (no /proc)."""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"   # TCP_LISTEN in /proc/net/tcp's "st" column


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str] | None:
    """Socket inodes listening on `port` (any local address), from /proc/net/tcp and tcp6; None without them."""
    tables = [proc / "net" / name for name in ("tcp", "tcp6")]
    if not any(t.is_file() for t in tables):
        return None
    inodes = set()
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def group_members(group: int, proc: Path = Path("/proc")) -> list[int]:
    """The pids whose process group is `group` (the group's leader included)."""
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the command's closing parenthesis: state, ppid, pgrp, ...
        after = stat[stat.rfind(")") + 2:].split()
        if len(after) > 2 and int(after[2]) == group:
            members.append(int(entry.name))
    return members


def listens(group: int, port: int, proc: Path = Path("/proc")) -> bool | None:
    """True when a process of process group `group` listens on TCP `port`; None where /proc cannot tell."""
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return None
    if not inodes:
        return False
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in group_members(group, proc):
        try:
            fds = os.listdir(proc / str(pid) / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(proc / str(pid) / "fd" / fd) in wanted:
                    return True
            except OSError:
                continue
    return False
