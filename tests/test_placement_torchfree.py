"""Planning layers stay torch-free: importing placement, traces and the CLI loads no torch."""

import subprocess
import sys


def test_planning_imports_leave_torch_out():
    code = (
        "import sys; import moeplan.planners.placement.planner, moeplan.planners.placement.eplb, "
        "moeplan.traces.format, moeplan.traces.synthetic, moeplan.traces.stats, "
        "moeplan.traces.sglang, moeplan.traces.hf_recorder, moeplan.cli.place, "
        "moeplan.cli.trace, moeplan.export.expert_location; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"
