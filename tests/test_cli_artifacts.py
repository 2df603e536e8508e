"""Every file ``moeplan plan`` writes into ``--out`` is declared in the output set (an
undeclared name made every P/D-winning plan fail after minutes of planning)."""

from __future__ import annotations

import re
from pathlib import Path

from moeplan.report import plan_report


def test_every_written_artifact_is_declared():
    src = Path(plan_report.__file__).read_text(encoding="utf-8")
    written = set(re.findall(r'out\.write\(\s*"([^"]+)"', src))
    assert written, "no out.write(...) found: the pattern no longer matches the writer"
    assert written <= plan_report.ARTIFACTS, written - plan_report.ARTIFACTS
