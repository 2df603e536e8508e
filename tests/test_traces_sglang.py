"""SGLang expert-distribution dumps: stat and per_token layouts, safe loading only."""

import numpy as np
import pytest

from moeplan.errors import MoeplanError
from moeplan.traces.sglang import read_per_token, read_stat

torch = pytest.importorskip("torch")


def _per_token_dump(path, rng, p2l, passes=3):
    """A dump in the layout SGLang's _DetailAccumulator writes (num_layers incl. dense)."""
    num_layers, num_phy = p2l.shape
    records, truth = [], []
    for fp in range(passes):
        seg = [int(s) for s in rng.integers(1, 5, size=2)]
        t = sum(seg)
        topk = torch.full((num_layers, t, 8), -1, dtype=torch.int32)
        logical = np.zeros((t, num_layers - 1, 2), dtype=np.int64)
        for layer in range(1, num_layers):  # layer 0 is dense: never routed
            phys = torch.tensor(rng.integers(0, num_phy, size=(t, 2)), dtype=torch.int32)
            topk[layer, :, :2] = phys
            logical[:, layer - 1] = p2l[layer][phys.numpy()]
        ids = rng.integers(0, 1000, size=t).tolist()
        records.append(
            dict(
                forward_pass_id=fp,
                rank=0,
                gatherer_key="primary",
                input_ids=ids,
                positions=list(range(t)),
                extend_seq_lens=seg,
                forward_mode=1,
                topk_ids_of_layer=topk,
                misc_objects=[],
                global_physical_count=torch.zeros(num_layers, num_phy),
            )
        )
        truth.append((ids, logical, seg))
    torch.save({"records": records, "last_physical_to_logical_map": torch.tensor(p2l)}, path)
    return truth


def test_per_token_dump_maps_physical_to_logical(tmp_path):
    """Top-k ids come back as logical ids of the MoE layers; requests follow extend lens."""
    rng = np.random.default_rng(0)
    p2l = np.stack([rng.permutation(8) for _ in range(4)])  # 4 layers, 8 experts
    truth = _per_token_dump(tmp_path / "expert_distribution_recorder_1_0.pt", rng, p2l)
    tr = read_per_token([tmp_path / "expert_distribution_recorder_1_0.pt"], num_experts=8)
    assert tr.num_layers == 3 and tr.top_k == 2
    assert np.array_equal(tr.experts, np.concatenate([t[1] for t in truth]))
    assert tr.token_id.tolist() == sum((t[0] for t in truth), [])
    lens = sum((t[2] for t in truth), [])
    assert np.bincount(tr.request_id).tolist() == lens


def test_stat_dump_sums_steps(tmp_path):
    """logical_count [steps, layers, E] is summed over steps and files."""
    c = torch.randint(0, 50, (5, 3, 8), dtype=torch.int32)
    for r in range(2):
        torch.save(
            {"rank": r, "logical_count": c, "average_utilization_rate_over_window": None},
            tmp_path / f"s{r}.pt",
        )
    load = read_stat([tmp_path / "s0.pt", tmp_path / "s1.pt"], num_experts=8)
    assert np.array_equal(load, 2 * c.numpy().sum(axis=0))


class Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_unsafe_pickles_are_refused(tmp_path):
    """weights_only=True loading refuses arbitrary objects with a one-line error."""
    torch.save({"logical_count": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(MoeplanError, match="cannot be read safely"):
        read_stat([tmp_path / "evil.pt"])
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(MoeplanError):
        read_per_token([tmp_path / "junk.pt"])


def test_cli_import_writes_a_trace(tmp_path, capsys):
    """moeplan trace import --from sglang-per-token writes a readable trace file."""
    from moeplan.cli import main
    from moeplan.traces.format import load_trace

    rng = np.random.default_rng(1)
    p2l = np.tile(np.arange(8), (3, 1))
    _per_token_dump(tmp_path / "d.pt", rng, p2l)
    main(
        [
            "trace",
            "import",
            str(tmp_path / "d.pt"),
            "--out",
            str(tmp_path / "t.npz"),
            "--num-experts",
            "8",
            "--json",
        ]
    )
    tr = load_trace(tmp_path / "t.npz")
    assert tr.num_layers == 2 and tr.num_experts == 8
    assert '"occurrences"' in capsys.readouterr().out
