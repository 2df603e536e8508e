"""``launch.sh`` and ``stop.sh`` of one engine's deployment (pure: commands in, bash out).

``launch.sh`` runs on every node with ``NODE_RANK`` (default 0 on one node) and the address of
every node in ``NODE_<r>_ADDR`` (default ``127.0.0.1`` on one node). It starts this node's
servers in order (prefill pool first), each in its own process group with its output in
``logs/<server>.log`` and its process id in ``pids.<NODE_RANK>``; on node 0 it then waits for
every server's ``/health`` (both engines serve it; ``MOEPLAN_WAIT_S``, default 1800 s) and
starts the router. It stays in the foreground until they exit (Ctrl-C stops them). ``stop.sh`` ends the process groups this node's ``launch.sh`` recorded, and
nothing else.

Quoting is :mod:`moeplan.export.launcher`'s: every argument single-quoted except the shell
variables named on purpose, comments with their control characters escaped, NUL refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from moeplan.export.launch_servers import ServerCommands
from moeplan.export.launcher import HERE, comment, render_command

WAIT_S = 1800  # seconds launch.sh waits for a server's /health (a large model loads minutes)

_FUNCS = [
    'LOGS="${HERE}/logs"',
    'PIDS="${HERE}/pids.${NODE_RANK}"',
    'mkdir -p "${LOGS}"',
    ': > "${PIDS}"',
    "start() {  # start NAME CMD...: CMD in its own process group, logged, pid recorded",
    '  local name="$1"',
    "  shift",
    '  setsid "$@" > "${LOGS}/${name}.log" 2>&1 < /dev/null &',
    '  echo "$!" >> "${PIDS}"',
    '  echo "moeplan: started ${name} (pid $!, log ${LOGS}/${name}.log)"',
    "}",
    "wait_ready() {  # wait_ready URL: until URL/health answers",
    "  local waited=0",
    '  until curl -sf "$1/health" > /dev/null 2>&1; do',
    f'    if [ "${{waited}}" -ge "${{MOEPLAN_WAIT_S:-{WAIT_S}}}" ]; then',
    '      echo "moeplan: $1 is not ready; see ${LOGS}" >&2',
    "      exit 1",
    "    fi",
    "    sleep 5",
    "    waited=$((waited + 5))",
    "  done",
    "}",
]


_WAIT = [  # stay in the foreground while the servers run; Ctrl-C (or TERM) stops them
    'echo "moeplan: started; stop with ${HERE}/stop.sh or Ctrl-C here"',
    'trap \'while read -r pid; do kill -TERM -- "-${pid}" 2> /dev/null || true; done'
    ' < "${PIDS}"\' INT TERM',
    "wait",
]


def _nodes_preamble(num_nodes: int) -> list[str]:
    if num_nodes == 1:
        return ['NODE_RANK="${NODE_RANK:-0}"', 'NODE_0_ADDR="${NODE_0_ADDR:-127.0.0.1}"']
    out = [
        f'NODE_RANK="${{NODE_RANK:?set NODE_RANK to the rank of this node, 0..{num_nodes - 1}}}"'
    ]
    out += [
        f'NODE_{r}_ADDR="${{NODE_{r}_ADDR:?set NODE_{r}_ADDR to the address of node {r}}}"'
        for r in range(num_nodes)
    ]
    return out


def _start(sc: ServerCommands, index: int) -> list[str]:
    """The lines running ``sc``'s command of its ``index``-th node."""
    cmds = sc.nodes[index]
    if not cmds:  # started from the slot's first node (an MPI job reaches this one)
        return [f"    :  # {sc.slot.name} runs here as ranks of its job on node {sc.slot.nodes[0]}"]
    env = [f"{k}={v}" for k, v in sc.env]
    lines = [render_command(c, indent="    ") for c in cmds[:-1]]  # e.g. `ray start --head`
    prefix = ["start", sc.slot.name, *(["env", *env] if env else [])]
    lines.append(render_command([*prefix, *cmds[-1]], indent="    "))
    return lines


def render_launch(
    servers: Sequence[ServerCommands],
    router: Sequence[str] | None,
    *,
    num_nodes: int,
    comments: Sequence[str],
) -> str:
    """The ``launch.sh`` text (module docstring)."""
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", *[comment(c) for c in comments]]
    lines += [HERE, *_nodes_preamble(num_nodes), *_FUNCS, 'case "${NODE_RANK}" in']
    for node in range(num_nodes):
        body: list[str] = []
        for sc in servers:
            if node in sc.slot.nodes:
                body += _start(sc, sc.slot.nodes.index(node))
        lines += [f"  {node})", *(body or ["    :  # no server on this node"]), "    ;;"]
    lines += [
        f'  *) echo "moeplan: NODE_RANK (${{NODE_RANK}}) must be 0..{num_nodes - 1}" >&2;'
        " exit 2 ;;",
        "esac",
    ]
    if router is not None:
        lines += ['if [ "${NODE_RANK}" = 0 ]; then']
        for sc in servers:
            s = sc.slot
            lines.append(f'  wait_ready "http://${{NODE_{s.nodes[0]}_ADDR}}:{s.port}"')
        lines += [render_command(["start", "router", *router], indent="  "), "fi"]
    lines += _WAIT
    return "\n".join(lines) + "\n"


def render_stop(comments: Sequence[str] = ()) -> str:
    """The ``stop.sh`` text: ends the process groups ``launch.sh`` started on this node."""
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", *[comment(c) for c in comments]]
    lines += [
        HERE,
        'NODE_RANK="${NODE_RANK:-0}"',
        'PIDS="${HERE}/pids.${NODE_RANK}"',
        'if [ ! -f "${PIDS}" ]; then',
        '  echo "moeplan: nothing started on node ${NODE_RANK} (no ${PIDS})"',
        "  exit 0",
        "fi",
        "while read -r pid; do",
        '  kill -TERM -- "-${pid}" 2> /dev/null || kill -TERM "${pid}" 2> /dev/null || true',
        'done < "${PIDS}"',
        'rm -f "${PIDS}"',
        'echo "moeplan: stopped what launch.sh started on node ${NODE_RANK}"',
    ]
    return "\n".join(lines) + "\n"
