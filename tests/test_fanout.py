"""Independent pieces of a search in worker processes (moeplan.search.job.fanout and the CLI's
``--jobs``): every result equals the serial run's, bit for bit; only where it ran differs."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from cli_run import run_main
from moeplan.commands.workers import forked, workers
from moeplan.errors import MoeplanError
from moeplan.search.capacity.slo import CapacitySearch, slo_capacity
from moeplan.search.disagg import search as ds
from moeplan.search.disagg.pools import Context
from moeplan.search.job.fanout import fan_out, serial, using
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.iteration.model import Batch
from moeplan.specs import load_cluster, load_model


def _pid(i: int) -> tuple[int, int]:
    return i, os.getpid()


def test_forked_keeps_order_and_runs_the_first_thunk_here():
    thunks = [lambda i=i: _pid(i) for i in range(5)]
    with using(forked(2)):
        got = fan_out(thunks)
    assert [i for i, _ in got] == list(range(5))
    assert got[0][1] == os.getpid()  # the first runs in the calling process
    assert all(pid != os.getpid() for _, pid in got[1:])  # the rest in workers
    assert serial(thunks) == [(i, os.getpid()) for i in range(5)]


def test_a_workers_own_fan_outs_run_in_that_worker():
    def nested() -> set[int]:
        return {pid for _, pid in fan_out([lambda i=i: _pid(i) for i in range(3)])}

    with using(forked(2)):
        _, inner = fan_out([lambda: None, nested])
    assert len(inner) == 1 and os.getpid() not in inner


def _fail() -> None:
    raise MoeplanError("requests (3) must be >= 35")


def test_an_error_in_a_worker_reaches_the_caller():
    with using(forked(2)), pytest.raises(MoeplanError, match=r"requests \(3\)"):
        fan_out([lambda: 1, _fail])


def _die() -> None:
    os._exit(9)  # as the kernel's OOM killer would end it: no result, no exception


def test_a_dead_worker_is_one_error_not_a_hang():
    with using(forked(2)), pytest.raises(MoeplanError, match="ended without its result"):
        fan_out([lambda: 1, _die, lambda: 3])


def test_kernel_lookups_made_in_workers_are_counted_here():
    """The pricing section counts lookups: a worker's are added to the planning process's
    model, so pricing one shape in a worker counts what pricing it here counts."""
    from moeplan.kernel_tables import engine_cost_model

    c = load_cluster("h100-sxm-8")
    m = load_model("qwen3-30b-a3b")
    here, there = engine_cost_model(c), engine_cost_model(c)
    here.expert_ffn(m, 64.0, 1, 1)
    with using(forked(2, carry=[there])):
        fan_out([lambda: None, lambda: there.expert_ffn(m, 64.0, 1, 1)])
    assert there.lookup_counts() == here.lookup_counts() != {}


def _linear(b: Batch) -> float:  # 5 ms + 1 ms per decode sequence + 1 us per prompt token
    return 0.005 + 0.001 * b.decode + 1e-6 * sum(q for q, _ in b.prefill)


def test_capacity_and_its_interval_are_the_same_with_workers():
    """Replications and the lower-rate checks run side by side: the same capacity, interval
    and probe count as one after another."""
    slo = SLO(ttft_s=2.0, tpot_s=0.04)
    cfg = EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=256, kv_tokens=10**7)
    wl = ServeWorkload(num_requests=100, rate=1.0, isl=LengthDist(mean=128),
                       osl=LengthDist(mean=50))  # fmt: skip
    alone, run = slo_capacity(cfg, _linear, wl, slo, CapacitySearch(guess_rps=20.0, requests=300))
    with workers(2):
        side, run2 = slo_capacity(
            cfg, _linear, wl, slo, CapacitySearch(guess_rps=20.0, requests=300)
        )
    assert side == alone and side.low_rps < side.rate_rps < side.high_rps
    assert run is not None and run2 is not None
    assert (run.res.finish_s[run.window] == run2.res.finish_s[run2.window]).all()


def _small_context(cost_model: type) -> Context:
    """Qwen3-30B-A3B on one 4-GPU H100 node, 60 short requests: a disaggregated search in
    seconds."""
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=4)
    w = ServeWorkload(num_requests=60, rate=1.0, isl=LengthDist(mean=512),
                      osl=LengthDist(mean=32))  # fmt: skip
    return Context(model=load_model("qwen3-30b-a3b"), cluster=c, cost=cost_model(c), workload=w,
                   slo=SLO(ttft_s=0.5, tpot_s=0.03))  # fmt: skip


def test_disaggregated_search_is_the_same_with_workers():
    """Each family's first deployment searched in a worker: the same deployments simulated,
    the same capacities and the same certificate (Qwen3-30B-A3B, one 4-GPU H100 node)."""
    from moeplan.cost import CostModel

    ctx = _small_context(CostModel)
    fams = ["pd", "afd"]
    done, cert = ds.search_disaggregated(ctx, fams, incumbent=0.0, requests=60)
    with workers(2):
        bounds, found, _ = ds.first_searches(ctx, fams, 60)
    again = ds.space(ctx, fams, bounds)  # the pools' bounds given, not computed
    assert [(k.x, k.y, k.bound) for k in again] == [
        (k.x, k.y, k.bound) for k in ds.space(ctx, fams)
    ]
    done2, cert2 = ds.search_disaggregated(ctx, fams, incumbent=0.0, requests=60,
                                           first_found=found, cands=again)  # fmt: skip
    assert cert2 == cert and len(found) == len(fams)
    assert [(k.x, k.y, k.capacity) for k in done2] == [(k.x, k.y, k.capacity) for k in done]


@pytest.mark.parametrize("jobs", ["0", "257"])
def test_jobs_out_of_range_is_one_line_exit_2(capsys, tmp_path, jobs):
    code, out, err = run_main(capsys, "plan", "--model", "qwen3-30b-a3b", "--cluster",
                              "h100-sxm-8", "--jobs", jobs, "--out", str(tmp_path / "o"))  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"--jobs ({jobs}) must be in 1..256" in err
    assert not (tmp_path / "o").exists()


def test_begun_thunks_run_in_workers_and_join_in_order():
    """begin: every thunk starts in a worker at once (none here) and join gives them in
    order; without workers they run here when joined; cancel stops a running one."""
    from moeplan.commands.workers import started
    from moeplan.search.job.fanout import Later, begin

    thunks = [lambda i=i: _pid(i) for i in range(3)]
    with using(forked(2), 2, started(2)):
        handle = begin(thunks)
        got = handle.join()
        handle.cancel()  # after a join: nothing left to stop, no error
    assert [i for i, _ in got] == [0, 1, 2] and all(p != os.getpid() for _, p in got)
    later = begin(thunks)  # no runner installed: the default
    assert isinstance(later, Later) and later.join() == [(i, os.getpid()) for i in range(3)]
    with using(forked(2), 2, started(2)):
        slow = begin([lambda: time.sleep(30)])
    manager = slow.pool._executor_manager_thread
    t0 = time.perf_counter()
    slow.cancel()
    assert time.perf_counter() - t0 < 5
    # its manager thread is gone: nothing left for the interpreter's exit handler to race
    assert manager is not None and not manager.is_alive()


def test_an_interval_searched_ahead_equals_the_one_searched_in_place():
    """The best first deployment's interval searched ahead (in a worker, before the search
    knows it wins) gives the capacity record that searching it at the end gives."""
    from moeplan.cost import CostModel
    from moeplan.search.disagg.capacity import capacity_record

    ctx = _small_context(CostModel)
    fams = ["pd", "afd"]
    with workers(2):
        bounds, found, ahead = ds.first_searches(ctx, fams, 60, interval=True)
    assert ahead is not None
    recs = []
    for given in (None, ahead):
        done, _ = ds.search_disaggregated(ctx, fams, incumbent=0.0, requests=60,
                                          first_found=found, cands=ds.space(ctx, fams, bounds))  # fmt: skip
        # the deployment the interval was searched ahead for (the best first one; whether it
        # wins depends on the prices): its record is the same either way
        (pc,) = [p for p in done if p.capacity is ahead[0]]
        recs.append(capacity_record(pc, ctx, 60, given))
    assert (
        recs[0] == recs[1]
        and recs[0]["ci95_rps_per_instance"][0] < recs[0]["rate_rps_per_instance"]
    )


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
def test_workers_die_with_a_planning_process_killed_outright(tmp_path):
    """SIGKILL of the planning process (a caller's timeout) runs no cleanup: its workers end
    too, not as orphans computing on."""
    import signal

    mark = tmp_path / "worker.pid"

    def in_worker() -> None:
        mark.write_text(str(os.getpid()))
        time.sleep(60)

    planner = os.fork()
    if planner == 0:  # the planning process: one thunk here, one in a worker
        try:
            with using(forked(2)):
                fan_out([lambda: time.sleep(60), in_worker])
        finally:
            os._exit(0)
    deadline = time.monotonic() + 30
    while not mark.exists() or not mark.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    worker = int(mark.read_text())
    os.kill(planner, signal.SIGKILL)
    os.waitpid(planner, 0)
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the worker outlived its planning process"
