"""Sweep every flag of every command (tests/flag_registry.py) through ``moeplan``: each probe
must change the ``--json`` answer, be refused with one line, or write its file. Prints one
line per flag (``ok`` or why not), then per command the flags swept, read and the seconds
taken, and exits 1 if any flag was found ignored or failing (``make fuzz``).

    python bench/flag_sweep.py [--only COMMAND] [--flags NAME ...] [--timeout S] [--budget S]

``--budget`` stops the sweep after that many seconds and lists the flags it left unswept.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from flag_registry import NOT_SWEPT, REGISTRY, check, make_trace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="one command (e.g. 'serve-sim', 'trace stats')")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per moeplan run")
    ap.add_argument("--flags", nargs="+", help="only these flags, without their dashes "
                    "(e.g. model-path any-divisor: what a --budget left)")  # fmt: skip
    ap.add_argument("--budget", type=float, help="stop after this many seconds in all")
    a = ap.parse_args()
    start = time.monotonic()
    left: list[str] = []
    bad = total = 0
    summary: list[str] = []
    answers: dict = {}  # each base question runs once
    with tempfile.TemporaryDirectory() as tmp:
        trace = make_trace(Path(tmp))
        for command, (_, probes) in REGISTRY.items():
            if a.only and command != a.only:
                continue
            if command in NOT_SWEPT:
                print(f"{command}: not swept ({NOT_SWEPT[command]})")
                continue
            began, swept, read = time.monotonic(), 0, 0
            for flag in probes:
                if a.flags and flag.removeprefix("--") not in a.flags:
                    continue
                if a.budget is not None and time.monotonic() - start > a.budget:
                    left.append(f"{command} {flag}")
                    continue
                why = check(command, flag, trace, a.timeout, answers)
                print(f"{command} {flag}: {'ok' if why is None else why}", flush=True)
                bad += why is not None
                swept, read = swept + 1, read + (why is None)
                total += 1
            if swept:
                summary.append(f"{command}: {swept} swept, {read} read, "
                               f"{time.monotonic() - began:.0f} s")  # fmt: skip
    for line in summary:
        print(line)
    if left:
        print(f"not swept within --budget {a.budget:.0f} s: {' '.join(left)}")
    print(f"{total} flag(s) swept in {time.monotonic() - start:.0f} s: {bad} ignored or "
          f"failing, {len(left)} not swept")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
