"""Every command prints in any locale and never lets input control characters through.

Each CLI command runs (its ``--help`` and one cheap real invocation) with stdout and stderr
that encode ASCII strictly, as under ``LC_ALL=C`` / ``PYTHONIOENCODING=ascii``: no
``UnicodeEncodeError`` (an "internal error", exit 1), the output is ASCII, the exit code is
0 or 2. One run goes through a real subprocess with those environment variables."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moeplan.cli import main

SHARED_CONFIG = "Mixtral-8x7B-v0.1.json"
CHEAP = {  # command -> one cheap real invocation ({tmp}: a folder holding a synthetic trace)
    "calibrate": "calibrate --measured no-such-set",
    "cost": "cost allreduce --message-size 1048576 --num-gpus 8",
    "dep": "dep --model deepseek-v2-lite --cluster nope",
    "models": "models",
    "clusters": "clusters",
    "inspect": "inspect mixtral-8x7b",
    "pipeline": "pipeline --model mixtral-8x7b --cluster nope",
    "place": "place --routing-trace {tmp}/t.npz --model mixtral-8x7b --ep 2",
    "plan": "plan --model mixtral-8x7b --cluster nope",
    "recommend": "recommend --model mixtral-8x7b --cluster nope --rate 1",
    "run": "run --plan {tmp}/no-plan.json",
    "serve-sim": "serve-sim --model mixtral-8x7b --cluster h100-sxm-8 --requests 5",  # no fit
    "bench": "bench --model mixtral-8x7b --cluster h100-sxm-8 --num-prompts 4",  # no fit
    "validate": "validate {tmp}/none.csv",
    "strategy": "strategy --model mixtral-8x7b --cluster h100-sxm-8",
    "trace synth": "trace synth --model mixtral-8x7b --requests 4 --out {tmp}/t.npz",
    "trace import": "trace import {tmp}/none.pt --from sglang-statistics --out {tmp}/l.json",
    "trace stats": "trace stats {tmp}/t.npz",
}


def ascii_run(args: list[str], monkeypatch) -> tuple[int, bytes, bytes]:
    """``moeplan args`` with strict-ASCII stdout/stderr; (exit code, stdout, stderr)."""
    out, err = io.BytesIO(), io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="ascii", write_through=True))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(err, encoding="ascii", write_through=True))
    code = 0
    try:
        main(args)
    except SystemExit as ex:
        code = int(ex.code or 0)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("locale")
    main(["trace", "synth", "--model", "mixtral-8x7b", "--requests", "4", "--out",
          str(tmp / "t.npz")])  # fmt: skip
    return tmp


def test_every_command_is_covered():
    import typer.main

    from moeplan.cli import app

    def walk(c, prefix):
        for name, sub in getattr(c, "commands", {}).items():
            yield from (
                walk(sub, [*prefix, name])
                if hasattr(sub, "commands")
                else [" ".join([*prefix, name])]
            )

    assert set(walk(typer.main.get_command(app), [])) == set(CHEAP)


@pytest.mark.parametrize("command", sorted(CHEAP))
def test_command_prints_in_ascii(command, synth_trace, monkeypatch):
    code, out, err = ascii_run([*command.split(), "--help"], monkeypatch)
    assert code == 0 and out.isascii() and b"internal error" not in err, err
    args = CHEAP[command].replace("{tmp}", str(synth_trace)).split()
    code, out, err = ascii_run(args, monkeypatch)
    assert code in (0, 2) and b"internal error" not in err, err.decode("ascii", "replace")
    assert out.isascii() and err.isascii()
    if code == 2:
        assert len(err.decode().strip().splitlines()) == 1


def test_control_characters_from_a_config_are_escaped(tmp_path, capsys):
    """An ESC sequence in ``architectures`` (window title, clear screen) is printed as text:
    the architecture is not a registered one, and the error line quotes it escaped."""
    from moeplan.specs.presets import model_config

    cfg = dict(model_config("mixtral-8x7b"))
    cfg["architectures"] = ["MixtralForCausalLM\x1b]0;TITLE\x07\x1b[2J\x9b31m"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SystemExit) as info:
        main(["inspect", str(tmp_path / "config.json")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\x9b" not in err
    assert "\\x1b]0;TITLE" in err


def test_control_characters_in_a_config_path_are_escaped(tmp_path, capsys):
    """A folder name with ESC sequences names the model: printed escaped on success."""
    from moeplan.specs.presets import model_config

    folder = tmp_path / "m\x1b[2Jx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(model_config("mixtral-8x7b")))
    main(["inspect", str(folder / "config.json")])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2Jx" in out


def test_a_real_c_locale_subprocess():
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii",
           "PYTHONUTF8": "0"}  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "moeplan", "calibrate", "--help"], env=env,
                       capture_output=True, timeout=120)  # fmt: skip
    assert p.returncode == 0 and p.stdout.isascii() and p.stderr == b"", p.stderr


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
@pytest.mark.parametrize("after", ["_multiarray_umath", "scipy"])
def test_ctrl_c_while_modules_load_is_one_line_and_130(after):
    """SIGINT once NumPy (then SciPy) is loaded, i.e. while the commands' modules are still
    being imported: ``moeplan: aborted``, exit 130, no traceback."""
    import signal
    import time

    cmd = [sys.executable, "-m", "moeplan", "strategy", "--model", "mixtral-8x7b", "--cluster",
           "h100-sxm-8"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while after not in _maps(p.pid) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err) == (130, b"moeplan: aborted\n") or p.returncode == 0, err


def test_control_characters_in_an_error_line_are_escaped(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["inspect", "/nonexistent/\x1b]0;TITLE\x07\x1b[2J/config.json"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "\x1b" not in err and "\x07" not in err
    assert "\\x1b]0;TITLE" in err and len(err.strip().splitlines()) == 1
