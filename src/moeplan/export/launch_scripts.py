"""``launch.sh`` and ``stop.sh`` of one engine's deployment (pure: commands in, bash out).

``launch.sh`` runs on every node with ``NODE_RANK`` (default 0 on one node) and the address of
every node in ``NODE_<r>_ADDR`` (default ``127.0.0.1`` on one node); a P/D deployment whose
servers name their RDMA devices also needs ``MOEPLAN_IB_DEVICE``, checked before anything
starts. It refuses to start while a server an earlier ``launch.sh`` recorded on this node
still runs, then starts this node's servers in order (prefill pool first), each in its own
session with its output in ``logs/<server>.log`` and a record of its pid, start time and
command line in ``run.<NODE_RANK>/`` (:data:`_RECORDS`); on node 0 it then waits for every
server's ``/health`` (both engines serve it; ``MOEPLAN_WAIT_S``, default 1800 s) and starts
the router. It stays in the foreground until they exit (Ctrl-C stops them) and removes the
record of each server that exited. ``stop.sh`` signals the process group of each recorded
server whose pid still carries the recorded start time and command line, and nothing else.

Quoting is :mod:`moeplan.export.launcher`'s: every argument single-quoted except the shell
variables named on purpose, comments with their control characters escaped, NUL refused.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from moeplan.export.launch_servers import ServerCommands
from moeplan.export.launcher import HERE, comment, render_command

WAIT_S = 1800  # seconds launch.sh waits for a server's /health (a large model loads minutes)
STOP_WAIT_S = 60  # seconds stop.sh waits for a signalled server to exit before saying so

#: The record functions both scripts share. A server's record is ``run.<NODE_RANK>/<name>.pid``
#: (its pid and its start time: field 22 of ``/proc/PID/stat``, clock ticks after boot, or
#: ``ps -o lstart=`` where there is no ``/proc``), ``<name>.prog`` (its program's base name)
#: and ``<name>.args`` (its arguments, NUL-separated). A recorded server is *alive* when a
#: process with its pid has its start time and a command line ending with its arguments
#: after a word naming its program (an interpreter may come first: ``python3 .../bin/vllm``);
#: a pid the kernel gave to another process fails the test and is never signalled.
_RECORDS = [
    'RUN="${HERE}/run.${NODE_RANK}"',
    "started() {  # started PID: its start time, or nothing when no such process runs",
    "  local stat",
    '  if [ -r "/proc/$1/stat" ]; then',
    '    stat="$(cat "/proc/$1/stat" 2> /dev/null)" || return 0',
    '    read -r -a stat <<< "${stat##*) }"  # fields 3.. (the name may hold spaces)',
    '    echo "${stat[19]}"',
    "  elif [ ! -d /proc/self ]; then",
    '    ps -o lstart= -p "$1" 2> /dev/null || true',
    "  fi",
    "}",
    "same_cmd() {  # same_cmd PID NAME: PID's command line is NAME's recorded command",
    '  local args="${RUN}/$2.args" prog total n',
    '  prog="$(cat "${RUN}/$2.prog" 2> /dev/null)" || return 1',
    '  if [ ! -r "/proc/$1/cmdline" ]; then  # no /proc: the program name only',
    '    ps -o command= -p "$1" 2> /dev/null | grep -qF -- "${prog}"',
    "    return",
    "  fi",
    '  total="$(wc -c < "/proc/$1/cmdline")"',
    '  n="$(wc -c < "${args}")"',
    '  [ "${total}" -gt "${n}" ] || return 1',
    '  tail -c "${n}" "/proc/$1/cmdline" | cmp -s - "${args}" || return 1',
    "  head -c \"$((total - n))\" \"/proc/$1/cmdline\" | tr '\\0' '\\n' | sed 's,.*/,,' \\",
    '    | grep -qxF -- "${prog}"',
    "}",
    "alive() {  # alive NAME: NAME's recorded process still runs (module docstring)",
    '  local pid="" start=""',
    '  read -r pid start < "${RUN}/$1.pid" 2> /dev/null || true',
    '  [ -n "${pid}" ] && [ -n "${start}" ] || return 1',
    '  [ "$(started "${pid}")" = "${start}" ] || return 1',
    '  same_cmd "${pid}" "$1"',
    "}",
    "forget() {  # forget NAME: remove NAME's record",
    '  rm -f "${RUN}/$1.pid" "${RUN}/$1.prog" "${RUN}/$1.args"',
    "}",
    "names() {  # names: every recorded server",
    "  local rec",
    '  for rec in "${RUN}"/*.pid; do',
    '    [ -e "${rec}" ] || continue',
    '    rec="${rec##*/}"',
    '    echo "${rec%.pid}"',
    "  done",
    "}",
]

_FUNCS = [
    'LOGS="${HERE}/logs"',
    'mkdir -p "${LOGS}" "${RUN}"',
    "for name in $(names); do  # servers of an earlier launch.sh on this node",
    '  if alive "${name}"; then',
    '    echo "moeplan: ${name} of an earlier launch.sh still runs on node ${NODE_RANK}'
    + "'"
    + 's records; stop it with ${HERE}/stop.sh first" >&2',
    "    exit 1",
    "  fi",
    '  forget "${name}"',
    "done",
    "start() {  # start NAME CMD...: CMD in its own session (process group), logged, recorded",
    '  local name="$1" pid',
    "  shift",
    '  setsid "$@" > "${LOGS}/${name}.log" 2>&1 < /dev/null &',
    '  pid="$!"',
    '  local argv=("$@")',
    '  if [ "${argv[0]}" = env ]; then  # env K=V ... CMD: the process becomes CMD',
    '    argv=("${argv[@]:1}")',
    '    while [ "${#argv[@]}" -gt 1 ] && [[ "${argv[0]}" == *=* ]]; do argv=("${argv[@]:1}"); done',
    "  fi",
    '  printf \'%s\' "${argv[0]##*/}" > "${RUN}/${name}.prog"',
    '  printf \'%s\\0\' "${argv[@]:1}" > "${RUN}/${name}.args"',
    '  echo "${pid} $(started "${pid}")" > "${RUN}/${name}.pid"',
    '  echo "moeplan: started ${name} (pid ${pid}, log ${LOGS}/${name}.log)"',
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
    "stop_all() {",
    "  local name pid rest",
    "  for name in $(names); do",
    '    if alive "${name}"; then',
    '      read -r pid rest < "${RUN}/${name}.pid"',
    '      kill -TERM -- "-${pid}" 2> /dev/null || true',
    "    fi",
    "  done",
    "}",
    "prune() {  # forget the servers that exited",
    "  local name",
    "  for name in $(names); do",
    '    alive "${name}" || forget "${name}"',
    "  done",
    "}",
    "trap stop_all INT TERM",
    "trap prune EXIT",
    'while [ -n "$(jobs -pr)" ]; do',
    "  wait -n || true",
    "  prune",
    "done",
]

#: The RDMA devices a P/D server's KV transfer uses: required before anything starts
IB_CHECK = (
    'MOEPLAN_IB_DEVICE="${MOEPLAN_IB_DEVICE:?set MOEPLAN_IB_DEVICE to the RDMA device(s) the '
    'P/D servers move KV over (e.g. mlx5_0, or mlx5_0,mlx5_1; ibv_devices lists them)}"'
)


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


def _start(sc: ServerCommands, index: int, literals: Collection[str]) -> list[str]:
    """The lines running ``sc``'s command of its ``index``-th node (``literals``: arguments
    never expanded, :func:`moeplan.export.launcher.render_command`)."""
    cmds = sc.nodes[index]
    if not cmds:  # started from the slot's first node (an MPI job reaches this one)
        return [f"    :  # {sc.slot.name} runs here as ranks of its job on node {sc.slot.nodes[0]}"]
    env = [f"{k}={v}" for k, v in sc.env]
    lines = [render_command(c, "    ", literals) for c in cmds[:-1]]  # e.g. `ray start --head`
    prefix = ["start", sc.slot.name, *(["env", *env] if env else [])]
    lines.append(render_command([*prefix, *cmds[-1]], "    ", literals))
    return lines


def render_launch(
    servers: Sequence[ServerCommands],
    router: Sequence[str] | None,
    *,
    num_nodes: int,
    comments: Sequence[str],
    literals: Collection[str] = (),
) -> str:
    """The ``launch.sh`` text (module docstring); ``literals``: the user's strings among the
    arguments (a model path), which the shell never expands."""
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", *[comment(c) for c in comments]]
    lines += [HERE, *_nodes_preamble(num_nodes)]
    if any("${MOEPLAN_IB_DEVICE}" in a for sc in servers for n in sc.nodes for c in n for a in c):
        lines.append(IB_CHECK)
    lines += [*_RECORDS, *_FUNCS, 'case "${NODE_RANK}" in']
    for node in range(num_nodes):
        body: list[str] = []
        for sc in servers:
            if node in sc.slot.nodes:
                body += _start(sc, sc.slot.nodes.index(node), literals)
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
    """The ``stop.sh`` text: signals the process group of every server ``launch.sh`` recorded
    on this node that is still alive as recorded (:data:`_RECORDS`), waits for it to exit
    (``MOEPLAN_STOP_WAIT_S``) and removes its record; a stale record is removed unsignalled."""
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", *[comment(c) for c in comments]]
    lines += [HERE, 'NODE_RANK="${NODE_RANK:-0}"', *_RECORDS]
    lines += [
        'if [ ! -d "${RUN}" ]; then',
        '  echo "moeplan: nothing started on node ${NODE_RANK} (no ${RUN})"',
        "  exit 0",
        "fi",
        "left=0",
        "for name in $(names); do",
        '  pid=""',
        '  read -r pid rest < "${RUN}/${name}.pid" 2> /dev/null || true',
        '  if ! alive "${name}"; then',
        '    echo "moeplan: ${name} (pid ${pid:-?}) is not running as recorded; not signalled"',
        '    forget "${name}"',
        "    continue",
        "  fi",
        '  kill -TERM -- "-${pid}" 2> /dev/null || kill -TERM "${pid}" 2> /dev/null || true',
        "  waited=0",
        f'  while alive "${{name}}" && [ "${{waited}}" -lt "${{MOEPLAN_STOP_WAIT_S:-{STOP_WAIT_S}}}" ]; do',
        "    sleep 1",
        "    waited=$((waited + 1))",
        "  done",
        '  if alive "${name}"; then',
        '    echo "moeplan: ${name} (pid ${pid}) still runs after TERM; its record is kept" >&2',
        "    left=1",
        "  else",
        '    forget "${name}"',
        '    echo "moeplan: stopped ${name} (pid ${pid})"',
        "  fi",
        "done",
        'exit "${left}"',
    ]
    return "\n".join(lines) + "\n"
