"""The launch folder's lifecycle, run for real with bash on stand-in servers.

Oracle: the processes themselves. ``python`` is a stand-in that records its arguments and
sleeps until signalled, so ``launch.sh`` starts real processes from the exported commands;
the tests then look at which processes run, which were signalled and what each received."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from moeplan.export import constraints as cons
from moeplan.export.plan_export import PREFILL_UNIT, ExportContext, Option, engine_export
from moeplan.planners.layout import Layout
from moeplan.specs import load_cluster, load_model

#: a model path whose text names the scripts' own variables: it must reach the server as is
LITERAL = "/models/${HERE}/q ${NODE_RANK} $(touch PWNED)"
SERVER = """#!/bin/bash
printf '%s\\0' "$@" > "$ARGV_DIR/$$"
trap 'exit 0' TERM
while :; do sleep 0.1; done
"""


def _folder(tmp: Path) -> Path:
    """A launch folder of two SGLang replicas and the router, and stand-in programs."""
    m, c = load_model("qwen3-30b-a3b"), load_cluster("a100-sxm-8")
    opt = Option(strategy=Layout(attn_tp=4, moe_tp=4), label="tp4", family="strategy",
                 per_gpu=1.0, unit=PREFILL_UNIT, replicas=2)  # fmt: skip
    ctx = ExportContext(model_path=LITERAL, target=cons.Target.of(m, c), planned_layers=48,
                        full_layers=48)  # fmt: skip
    ex = engine_export("sglang", SimpleNamespace(model=m, cluster=c), ctx, [opt])
    folder = tmp / "launch"
    folder.mkdir()
    for name, text in ex.files.items():
        (folder / name).write_text(text)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(SERVER)
    (bin_dir / "curl").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    (tmp / "argv").mkdir()
    return folder


def _env(tmp: Path) -> dict[str, str]:
    return {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin", "ARGV_DIR": str(tmp / "argv")}


def _running(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


def _until(cond, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def _kill(pids) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_launch_records_refuses_a_second_launch_and_stop_ends_it(tmp_path):
    """launch.sh starts both servers and the router with the model path unexpanded, records
    them, refuses a second launch while they run; stop.sh ends them and the records go."""
    folder, env = _folder(tmp_path), _env(tmp_path)
    first = subprocess.Popen(["bash", str(folder / "launch.sh")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    argv = tmp_path / "argv"
    started: list[int] = []
    try:
        run = folder / "run.0"
        assert _until(lambda: len(list(argv.iterdir())) == len(list(run.glob("*.pid"))) == 3)
        started = [int(p.name) for p in argv.iterdir()]
        assert sorted(p.name for p in run.glob("*.pid")) == [
            "colocated-0.pid", "colocated-1.pid", "router.pid"]  # fmt: skip
        servers = [p.read_bytes().split(b"\0")[:-1] for p in argv.iterdir()]
        paths = [a[a.index(b"--model-path") + 1] for a in servers if b"--model-path" in a]
        assert paths == [LITERAL.encode()] * 2  # nothing in it was expanded or run
        assert not list(tmp_path.rglob("PWNED"))

        again = subprocess.run(["bash", str(folder / "launch.sh")], env=env,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 1 and "stop.sh" in again.stderr, again
        assert len(list(argv.iterdir())) == 3 and len(_running(started)) == 3

        stop = subprocess.run(["bash", str(folder / "stop.sh")], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert stop.returncode == 0, stop.stderr
        assert _until(lambda: not _running(started))
        first.wait(timeout=30)
        assert not list(run.iterdir())
    finally:
        _kill(started)
        if first.poll() is None:
            first.kill()
            first.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_stop_signals_only_a_process_that_is_still_the_recorded_one(tmp_path):
    """Records whose pid now belongs to another process (another command line, or another
    start time) are dropped unsignalled; the one record that matches its process is ended."""
    folder, env = _folder(tmp_path), _env(tmp_path)
    run = folder / "run.0"
    run.mkdir()
    args = ["-m", "sglang.launch_server", "--model-path", "m"]
    ours = subprocess.Popen([str(tmp_path / "bin" / "python"), *args], env=env,
                            start_new_session=True)  # fmt: skip
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    procs = [ours, other]
    try:
        assert _until(lambda: (tmp_path / "argv" / str(ours.pid)).exists())

        def start(pid: int) -> str:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]

        def record(name: str, pid: int, start_time: str) -> None:
            (run / f"{name}.pid").write_text(f"{pid} {start_time}\n")
            (run / f"{name}.prog").write_text("python")
            (run / f"{name}.args").write_bytes(b"".join(a.encode() + b"\0" for a in args))

        record("recycled", other.pid, start(other.pid))  # same start time, another command
        record("reborn", ours.pid, str(int(start(ours.pid)) + 1))  # its pid, another start
        stop = subprocess.run(["bash", str(folder / "stop.sh")], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert stop.stdout.count("not signalled") == 2, stop
        assert ours.poll() is None and other.poll() is None
        assert not list(run.iterdir())

        record("colocated-0", ours.pid, start(ours.pid))  # the control: it is the recorded one
        stop = subprocess.run(["bash", str(folder / "stop.sh")], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert stop.returncode == 0 and "stopped colocated-0" in stop.stdout, stop
        assert ours.wait(timeout=10) == 0 and other.poll() is None
        assert not list(run.iterdir())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
