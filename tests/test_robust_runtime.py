"""Runtime spawner: a stopped or dead worker ends the run in bounded time, one line
per rank, every child reaped, nothing left in /tmp; a signal to the parent reaches its workers.

Case 1 (SIGSTOPped worker through ``moeplan run``) and case 4 (``--timeout`` values, a rank
dying before rendezvous) from their reproductions.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moeplan.cli import main
from moeplan.runtime.spawn import KILL_GRACE_S, RUN_GRACE_S, init_distributed, spawn_world

TIMEOUT_S = 3.0


def _exit_code(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as ex:
        return int(ex.code or 0)
    return 0


def _dep_plan(tmp_path: Path, ma: int = 2) -> Path:
    path = tmp_path / "dep.json"
    path.write_text(
        json.dumps(
            {
                "schema": "moeplan.plan/1",
                "family": "dep",
                "layout": {"world_size": 2, "ag": 1, "eg": 1},
                "details": {"ma": ma, "r1": 2, "r2": 2, "order": "ASAS"},
            }
        )
    )
    return path


def _children(pid: int) -> list[int]:
    """Worker processes of ``pid`` (multiprocessing spawn children, not its resource tracker)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            cmd = Path(stat).with_name("cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in cmd and b"resource_tracker" not in cmd:
            out.append(int(Path(stat).parent.name))
    return sorted(out)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _sockets(pid: int) -> int:
    try:
        return sum(
            os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return 0


def _wait_for_workers(parent: subprocess.Popen, n: int, limit: float = 90.0) -> list[int]:
    """The workers' pids once each holds >= 3 sockets (store + peer links: past rendezvous)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and parent.poll() is None:
        kids = _children(parent.pid)
        if len(kids) >= n and all(_sockets(k) >= 3 for k in kids):
            return kids
        time.sleep(0.1)
    raise AssertionError(f"workers did not start: {parent.poll()}")


@pytest.mark.parametrize("value", ["nan", "inf", "1e12", "0", "-1"])
def test_case4_bad_timeout_is_one_line_before_anything_starts(tmp_path, capsys, value):
    assert _exit_code(["run", "--plan", str(_dep_plan(tmp_path)), "--timeout", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("moeplan: error: --timeout"), err


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([1], "JSON object"),
        ({"schema": "moeplan.plan/1", "family": "dep", "layout": [1]}, "plan.layout"),
        (
            {
                "schema": "moeplan.plan/1",
                "family": "dep",
                "layout": {"world_size": 2, "ag": 1, "eg": 1},
                "details": [1],
            },
            "plan",
        ),
    ],
)
def test_case9_tampered_plan_is_one_line(tmp_path, capsys, doc, needle):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    assert _exit_code(["run", "--plan", str(path), "--no-check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.parametrize("kind", ["dir", "binary"])
def test_case9_plan_path_is_a_directory_or_binary(tmp_path, capsys, kind):
    path = tmp_path / "plan.json"
    if kind == "dir":
        path.mkdir()
    else:
        path.write_bytes(b"\x00\xff\x80" * 50)
    assert _exit_code(["run", "--plan", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan" in err[0], err


def _dies_before_rendezvous(rank: int, world: int, stamp: str) -> str:
    if rank == 1:
        Path(stamp).write_text(str(time.time()))
        os._exit(3)
    init_distributed(rank, world, timeout_s=TIMEOUT_S)
    return "finished"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_case4_rank_dying_before_rendezvous_is_one_line_per_rank(tmp_path, capsys):
    from moeplan.cli.run import _finish

    stamp = tmp_path / "died"
    reports = spawn_world(
        _dies_before_rendezvous, 2, (str(stamp),), deadline_s=60, grace_s=RUN_GRACE_S
    )
    assert time.time() - float(stamp.read_text()) < RUN_GRACE_S + KILL_GRACE_S + 5
    assert reports[1]["kind"] == "died" and "code 3" in reports[1]["error"]
    assert not reports[0]["ok"]
    with pytest.raises(SystemExit) as info:
        _finish(reports, 2, as_json=False)
    assert info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [ln.split(":")[2].strip() for ln in err] == ["rank 0", "rank 1"], err


def _stops_itself(rank: int, world: int, stamp: str) -> str:
    init_distributed(rank, world, timeout_s=TIMEOUT_S)
    import torch
    import torch.distributed as dist

    if rank == 1:
        Path(stamp).write_text(str(time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)
    dist.all_reduce(torch.ones(2))
    return "finished"


@pytest.mark.timeout(60)
def test_stopped_worker_is_killed_and_reaped_within_timeout_plus_10s(tmp_path):
    stamp = tmp_path / "stopped"
    reports = spawn_world(_stops_itself, 2, (str(stamp),), deadline_s=120, grace_s=RUN_GRACE_S)
    assert time.time() - float(stamp.read_text()) < TIMEOUT_S + 10
    assert reports[0]["kind"] == "runtime"
    assert reports[1]["kind"] == "hung" and "SIGKILL" in reports[1]["error"]


def _moeplan_run(plan: Path, timeout: float, tokens: int = 512) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "moeplan",
            "run",
            "--plan",
            str(plan),
            "--tokens",
            str(tokens),
            "--no-check",
            "--timeout",
            str(timeout),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _tmp_run_dirs() -> set[str]:
    return set(glob.glob("/tmp/moeplan-run-*"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_case1_sigstopped_worker_ends_moeplan_run(tmp_path):
    """Reproduction 1: ``kill -STOP`` one worker of ``moeplan run --timeout 5``."""
    timeout = 5.0
    before = _tmp_run_dirs()
    proc = _moeplan_run(_dep_plan(tmp_path, ma=256), timeout)
    workers = _wait_for_workers(proc, 2)
    time.sleep(0.1)  # past rendezvous, before the forward pass ends (it takes ~1 s)
    os.kill(workers[-1], signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        while any(_alive(w) for w in workers) and time.monotonic() - stopped_at < 60:
            time.sleep(0.05)
        workers_gone = time.monotonic() - stopped_at
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            for w in workers:
                os.kill(w, signal.SIGKILL)
    # the run (every worker reaped) ends within timeout + 10 s; the parent then prints and
    # tears its interpreter down (seconds on a loaded 2-core machine)
    assert workers_gone < timeout + 10, workers_gone
    assert time.monotonic() - stopped_at < timeout + 20
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(ln.startswith("moeplan: error: rank ") for ln in lines), err
    assert _tmp_run_dirs() <= before


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_to_moeplan_run_reaches_its_workers(tmp_path):
    before = _tmp_run_dirs()
    proc = _moeplan_run(_dep_plan(tmp_path, ma=256), 30.0)
    workers = _wait_for_workers(proc, 2)
    time.sleep(0.1)  # past rendezvous, before the forward pass ends (it takes ~1 s)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 2 * KILL_GRACE_S + 5
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines() == ["moeplan: terminated (signal 15)"]
    assert not any(_alive(w) for w in workers)
    assert _tmp_run_dirs() <= before


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--timeout", "nan"], "--timeout (nan)"), (["--timeout", "0"], "--timeout (0)")],
)
def test_case4_torchrun_entry_validates_timeout(tmp_path, args, needle):
    """``python -m moeplan.runtime.launch`` (what torchrun starts): one line, exit 2."""
    p = subprocess.run(
        [sys.executable, "-m", "moeplan.runtime.launch", "--plan", str(_dep_plan(tmp_path)), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RANK": "0", "WORLD_SIZE": "1", "PYTHONWARNINGS": "ignore"},
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"moeplan: error: {needle} must be {'a finite number' if 'nan' in needle else 'positive'}"
    ]
