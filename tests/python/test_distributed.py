"""Data-parallel training with two gloo processes on the CPU."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import gpucore
from gpucore.training import distributed
import forked_python
from conftest import assert_states_equal

pytestmark = pytest.mark.slow  # spawns processes

MODELS = textwrap.dedent("""
    import os
    import signal
    import torch
    from torch import nn

    def mlp(fail_rank=-1):
        rank = int(os.environ.get("RANK", "0"))
        if rank == fail_rank:
            raise RuntimeError("rank %d was told to fail" % fail_rank)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
        if "SIGTERM_AT_FORWARD" in os.environ:  # "N0,N1": rank r sends itself SIGTERM in its Nr-th training forward
            at, calls = int(os.environ["SIGTERM_AT_FORWARD"].split(",")[rank]), [0]

            def signal_itself(module, inputs):
                if module.training:
                    calls[0] += 1
                    if calls[0] == at:
                        os.kill(os.getpid(), signal.SIGTERM)
            model.register_forward_pre_hook(signal_itself)
        return model

    class Picky(nn.Module):  # runs out of memory above 16 samples per training batch, as a small GPU would
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, x):
            if self.training and x.shape[0] > 16:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return self.net(x)

    def picky():
        return Picky()

    class Headed(nn.Module):  # a backbone and a classifier head, for fine-tuning
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Tanh())
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            return self.fc(self.features(x))
""")

WORKER = textwrap.dedent("""
    import json, os, sys, torch, gpucore
    from gpucore.signals import signal_name
    config = dict(model="ddp_models:mlp", epochs=2, batch_size=int(sys.argv[2]), optimizer="sgd", momentum=0.9,
                  lr=0.05, schedule="constant", shuffle=False, normalize=False, progress=False, run_dir=sys.argv[1],
                  name="ddp", weight_decay=0.0, accumulate_grad_batches=int(sys.argv[3]), val_fraction=0.0,
                  device=sys.argv[4], precision="32")
    config.update(json.loads(sys.argv[5]))
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 1, 8, 8, generator=generator), torch.randint(0, 10, (256,), generator=generator)
    try:
        result = gpucore.train(config, train_data=(x, y))
    except KeyboardInterrupt as stop:  # a stop signal: interrupted.pt is written
        with open(os.path.join(sys.argv[1], "stopped_%s.json" % os.environ.get("RANK", "0")), "w") as out:
            json.dump({"by": signal_name(stop), "steps": stop.result.steps}, out)
        sys.exit(0)
    torch.save(result.model.state_dict(), os.path.join(sys.argv[1], "weights_%s.pt" % os.environ.get("RANK", "0")))
""")


# WORKER with a communication hook on every DDP module the run makes: it all-reduces as DDP's default does and
# writes, per rank, how many buckets it reduced and the run's optimizer steps.
COUNTING_WORKER = textwrap.dedent("""
    import json, os, runpy, sys, torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    reduced = []

    def count_all_reduce(process_group, bucket):
        reduced.append(bucket.index())
        return allreduce_hook(process_group, bucket)

    class CountingDDP(torch.nn.parallel.DistributedDataParallel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_comm_hook(None, count_all_reduce)

    torch.nn.parallel.DistributedDataParallel = CountingDDP
    steps = runpy.run_path(os.path.join(os.path.dirname(__file__), "worker.py"))["result"].steps
    with open(os.path.join(sys.argv[1], "all_reduces_%s.json" % os.environ["RANK"]), "w") as out:
        json.dump({"buckets": reduced, "steps": steps}, out)
""")


# WORKER with torch.distributed's Python collectives recording each call: gpucore's own exchanges must not use them
# (see distributed.py: a tensor handed to gloo could be released by gloo's thread as the interpreter exits: SIGABRT).
RECORDING_WORKER = textwrap.dedent("""
    import json, os, runpy, sys, torch.distributed as dist

    called = []

    def recording(name, collective):
        def call(*args, **kwargs):
            called.append(name)
            return collective(*args, **kwargs)
        return call

    for name in ("all_reduce", "barrier", "broadcast", "all_gather", "all_gather_object", "broadcast_object_list",
                 "gather", "gather_object", "reduce", "scatter", "all_to_all", "monitored_barrier"):
        setattr(dist, name, recording(name, getattr(dist, name)))
    runpy.run_path(os.path.join(os.path.dirname(__file__), "worker.py"))
    with open(os.path.join(sys.argv[1], "collectives_%s.json" % os.environ.get("RANK", "0")), "w") as out:
        json.dump(called, out)
""")


def write_workers(folder):
    (folder / "ddp_models.py").write_text(MODELS)
    (folder / "worker.py").write_text(WORKER)
    (folder / "counting_worker.py").write_text(COUNTING_WORKER)
    (folder / "recording_worker.py").write_text(RECORDING_WORKER)
    return folder


@pytest.fixture
def workdir(tmp_path):
    return write_workers(tmp_path)


def environment(workdir, rank, world, port, launched=None):
    env = dict(os.environ, PYTHONPATH=f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if world > 1:
        # One intra-op thread per rank, as torchrun and devices: N give several ranks: two ranks of two threads each
        # on two cores wait on each other at every all-reduce (minutes per test where other jobs share the cores).
        env["OMP_NUM_THREADS"] = "1"
    if launched if launched is not None else world > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(world))
    return env


def start_workers(workdir, out, world, batch, accumulate, launched=None, device="cpu", keys=None, script="worker.py",
                  env=None, popen=forked_python.Popen):
    """The `world` processes of one job, started (forked_python's, unless `popen` says otherwise): finish_workers
    waits for them."""
    port = distributed.free_port()
    processes = [popen([sys.executable, str(workdir / script), str(out), str(batch), str(accumulate),
                        device, json.dumps(keys or {})],
                       env=dict(environment(workdir, rank, world, port, launched), **(env or {})),
                       stderr=subprocess.PIPE, text=True)
                 for rank in range(world)]
    return out, processes


def finish_workers(started, stopped=False):
    """Each rank's final weights of a job start_workers started, once every process ended well; stopped: what each
    rank's stop signal left instead (the worker's stopped_RANK.json)."""
    out, processes = started
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
    if stopped:
        return [json.load(open(out / f"stopped_{rank}.json")) for rank in range(len(processes))]
    return [torch.load(out / f"weights_{rank}.pt", weights_only=True) for rank in range(len(processes))]


def run_workers(*args, **kwargs):
    return finish_workers(start_workers(*args, **kwargs))


def run_jobs(*jobs):
    """Several jobs (start_workers' arguments, as (args, kwargs)) at once: their processes mostly start up and wait
    on each other, so a job and its one-process reference take little more than the job alone. Their weights."""
    started = [start_workers(*args, **kwargs) for args, kwargs in jobs]
    return [finish_workers(job) for job in started]


@pytest.fixture(scope="module")
def plain_jobs(tmp_path_factory):
    """Three jobs started at once (their processes mostly start up and wait on each other): a plain two-rank job
    ("two", recording gpucore's use of torch.distributed's collectives), its one-process reference with the same
    global batch ("one"), and the two-rank job again with SIGTERM to each rank a step apart ("stopped"). finish(name)
    waits for one: its weights, or for "stopped" what each rank's stop left."""
    workdir = write_workers(tmp_path_factory.mktemp("plain_jobs"))
    # "two" as a launcher starts ranks (subprocess's processes): each draws its own string hash seed, which forked
    # processes share, so an order that differs between ranks (a set of names) shows here.
    started = {"two": start_workers(workdir, workdir / "two", 2, 16, 2, script="recording_worker.py",
                                    popen=subprocess.Popen),
               "one": start_workers(workdir, workdir / "one", 1, 32, 2, script="recording_worker.py"),
               # rank 1 in its 5th forward (step 3, micro-batches of 16, 2 per step), rank 0 in its 7th (step 4)
               "stopped": start_workers(workdir, workdir / "stopped", 2, 16, 2, env={"SIGTERM_AT_FORWARD": "7,5"})}
    finished = {}

    def finish(name):
        if name not in finished:
            finished[name] = finish_workers(started.pop(name), stopped=name == "stopped")
        return finished[name]

    yield workdir, finish
    for _, processes in started.values():  # a job whose test did not run (-k)
        for process in processes:
            process.kill()
            process.communicate()


def test_two_ranks_agree_and_equal_one_process_with_the_same_global_batch(plain_jobs):
    # One two-process job and its one-process reference serve every check of a plain data-parallel run (each job
    # spawns its processes: seconds each). gpucore's own exchanges (the config and data-length checks, rank 0's run
    # directory, each epoch's metrics and the checkpoint barriers) go through the store, handing no tensor to the
    # backend; the training metrics still average over both ranks' samples: one process with the same global batch
    # trains on the same samples with the same weights.
    workdir, finish = plain_jobs
    two, (one,) = finish("two"), finish("one")
    assert_states_equal(two[1], two[0])
    for name in one:
        torch.testing.assert_close(two[0][name], one[name], rtol=1e-5, atol=1e-6)
    assert (workdir / "two" / "ddp" / "checkpoints" / "last.pt").exists()
    stats = json.load(open(workdir / "two" / "ddp" / "training_stats.json"))
    assert stats["status"] == "completed" and len(stats["epochs"]) == 2
    for rank in range(2):
        assert json.load(open(workdir / "two" / f"collectives_{rank}.json")) == []
    two, one = ([json.loads(line) for line in open(workdir / name / "ddp" / "metrics.jsonl")] for name in ("two", "one"))
    assert [row["epoch"] for row in two] == [1, 2]
    for metric in ("train_loss", "train_accuracy", "train_top5_accuracy"):
        assert [row[metric] for row in two] == pytest.approx([row[metric] for row in one], rel=1e-5), metric


def test_ranks_that_take_sigterm_a_step_apart_stop_at_the_same_step_and_resume_bitwise(plain_jobs):
    # torchrun, SLURM and devices: N signal every rank, but each takes the signal at its own moment: here rank 1 a
    # step before rank 0 (as under load in CI). Stopping each at its own next step boundary left rank 0 inside the
    # next step's all-reduce ("Connection closed by peer"), and the run failed without interrupted.pt. The ranks vote
    # through the store (the decisions, rank by rank, in test_ranks_vote_on_...): rank 1 in step 3 (for boundary 3),
    # rank 0 in step 4; both stop after step 5, the first boundary past every vote. Resumed, the job ends bitwise
    # where the plain two-rank job ends.
    workdir, finish = plain_jobs
    assert finish("stopped") == [{"by": "SIGTERM", "steps": 5}] * 2
    assert json.load(open(workdir / "stopped" / "ddp" / "training_stats.json"))["status"] == "interrupted"
    resumed = run_workers(workdir, workdir / "stopped", 2, 16, 2, keys={"resume": "auto"})
    assert_states_equal(resumed[0], finish("two")[0], label="resumed rank 0")
    assert_states_equal(resumed[1], finish("two")[0], label="resumed rank 1")


def test_two_ranks_fine_tune_a_frozen_backbone_like_one_process(workdir):
    # The backbone gets no gradients in epoch 1: DDP must not wait for them; from epoch 2 it trains at half the rate.
    keys = {"model": "ddp_models:Headed", "freeze": "backbone", "freeze_epochs": 1, "lr_backbone": 0.5}
    two, (one,) = run_jobs(((workdir, workdir / "two", 2, 16, 2), {"keys": keys}),
                           ((workdir, workdir / "one", 1, 32, 2), {"keys": keys}))
    assert_states_equal(two[1], two[0], keys=list(one))
    for name in one:
        torch.testing.assert_close(two[0][name], one[name], rtol=1e-5, atol=1e-6)
    torch.manual_seed(0)
    initial = torch.nn.Linear(64, 32)
    assert not torch.equal(one["features.1.weight"], initial.weight)  # trained in epoch 2


def test_compiled_ddp_all_reduces_once_per_optimizer_step(workdir):
    # run_setup compiles the DDP module (torch.compile(DDP(model))); the engine enters the no_sync() of the DDP
    # module under the compiled wrapper, so of each window of 2 micro-batches only the last backward all-reduces
    # (the model's one bucket), on both ranks, and the ranks end with the same weights.
    two = run_workers(workdir, workdir / "two", 2, batch=16, accumulate=2, keys={"compile": True, "epochs": 1},
                      script="counting_worker.py")
    assert_states_equal(two[1], two[0])
    for rank in range(2):
        counted = json.load(open(workdir / "two" / f"all_reduces_{rank}.json"))
        assert counted["steps"] == 4  # 128 samples per rank, micro-batches of 16, 2 per step
        assert counted["buckets"] == [0] * 4


def test_devices_2_starts_the_processes_itself(workdir, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    result = gpucore.train(dict(devices=2, device="cpu", epochs=1, progress=False, run_dir=str(workdir / "runs"),
                                data="synthetic_fashion", data_kwargs={"train_size": 2048, "val_size": 256},
                                batch_size=32))
    assert result.status == "completed" and result.best_metric > 0.5  # chance is 0.1
    assert result.steps == 32  # 2048 samples over 2 ranks in batches of 32


def test_out_of_memory_retry_keeps_sharding_the_data_over_the_ranks(workdir, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.syspath_prepend(str(workdir))  # the result's model is built here too
    result = gpucore.train(dict(devices=2, device="cpu", epochs=2, progress=False, run_dir=str(workdir / "runs"),
                                data="synthetic_fashion", model="ddp_models:picky", batch_size=32,
                                on_oom="reduce_batch",
                                data_kwargs={"train_size": 256, "val_size": 32, "size": 8}))
    # 128 samples per rank in micro-batches of 16, two per step: 4 steps per epoch (8 if each rank
    # trained on all 256 samples, as the retry once did).
    assert result.steps == 8
    stats = json.load(open(result.stats_path))
    assert stats["oom_reductions"] == [{"epoch": 1, "batch_size": 16, "accumulate_grad_batches": 2}]
    assert [row["epoch"] for row in stats["epochs"]] == [1, 2]


def test_a_failing_rank_stops_the_job_with_its_error(workdir, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    with pytest.raises(gpucore.TrainingError, match=r"rank 1 of 2 failed[\s\S]*rank 1 was told to fail"):
        gpucore.train(dict(devices=2, device="cpu", epochs=1, progress=False, run_dir=str(workdir / "runs"),
                           data="synthetic_fashion", dist_timeout=60,
                           model="ddp_models:mlp", model_kwargs={"fail_rank": 1},
                           data_kwargs={"train_size": 64, "val_size": 16}))


def test_more_processes_than_gpus_is_refused_before_starting_any(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(gpucore.ConfigError, match=r"devices: 2 starts one process per GPU, but torch sees 1 "
                                                  r"CUDA device\(s\); set devices to at most 1, or device: cpu"):
        gpucore.train(dict(devices=2, epochs=1, progress=False))


def test_devices_with_objects_from_python_is_refused():
    with pytest.raises(gpucore.ConfigError, match="torchrun"):
        gpucore.train(dict(devices=2), model=torch.nn.Linear(2, 2))


@pytest.mark.needs_cuda
def test_nccl_on_one_gpu_world_size_1(workdir):
    # The same launched one-process run with gloo on the CPU is the reference (float32, TF32 off on the GPU).
    keys = {"tf32": "false"}
    (weights,) = run_workers(workdir, workdir / "nccl", 1, batch=32, accumulate=2, launched=True, device="cuda",
                             keys=keys)
    (gloo,) = run_workers(workdir, workdir / "gloo", 1, batch=32, accumulate=2, launched=True, device="cpu", keys=keys)
    assert sorted(weights) == sorted(gloo)
    for name in gloo:
        torch.testing.assert_close(weights[name].cpu(), gloo[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_forwards_without_gradient_sync_run_in_ddps_no_sync(tmp_path, compiled):
    # The engine runs a DDP model's forwards inside its public no_sync() for all but the last micro-batch of an
    # accumulation window, also when torch.compile wraps the DDP module; a communication hook counts the buckets
    # DDP all-reduces: one per optimizer step. This fails when torch renames no_sync(), no longer decides the
    # backward's sync in the forward, or compiles DDP's forward.
    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(str(tmp_path / "store"), 1),
                                         rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
        reduced = []

        def count_all_reduce(state, bucket):
            reduced.append(bucket.index())
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done

        model.register_comm_hook(None, count_all_reduce)
        if compiled:
            model = torch.compile(model)
        config = gpucore._C.EngineConfig()
        config.device = torch.device("cpu")
        config.accumulate_grad_batches = 2
        engine = gpucore._C.Engine([gpucore._C.ParamGroup(list(model.parameters()))], config)
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        batches = gpucore._C.TensorBatches(x, y, 4, False, False, 0, torch.device("cpu"))
        engine.train_epoch(batches, model, None, None)
        assert engine.steps_in_pass() == 2
        assert reduced == [0, 0]
    finally:
        torch.distributed.destroy_process_group()


def _store(timeout_s):
    import datetime

    store = torch.distributed.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False,
                                       timeout=datetime.timedelta(seconds=timeout_s))
    return torch.distributed.PrefixStore("gpucore/attempt_0", store)  # as rendezvous_store's


def test_waiting_on_the_store_ends_when_the_peers_keys_arrive_or_at_its_timeout_as_store_wait():
    import threading
    import time

    store = _store(timeout_s=1)
    threading.Timer(0.3, store.set, ("peer", "arrived")).start()  # the peer, late
    started = time.monotonic()
    distributed.wait_for_keys(store, ["peer"])
    assert 0.3 <= time.monotonic() - started < 0.9 and store.get("peer") == b"arrived"
    store.set("own", "1")
    started = time.monotonic()
    with pytest.raises(torch.distributed.DistStoreError) as ours:  # the peer never comes: dist_timeout's error
        distributed.wait_for_keys(store, ["own", "gone"])
    assert 1.0 <= time.monotonic() - started < 1.5
    with pytest.raises(torch.distributed.DistStoreError) as blocking:
        store.wait(["gone"])
    assert str(ours.value) == "wait timeout after 1000ms, keys: gone"
    assert str(blocking.value).startswith("wait timeout after 1000ms, keys: ") and "gone" in str(blocking.value)


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_while_waiting_on_the_store_for_a_dead_peer_stops_within_a_second(signum):
    # torchrun SIGTERMs the ranks left when one dies; one waiting for the dead rank's keys (rank 0's checkpoint) must
    # answer it as a stop at once, not sit in the store until torchrun's SIGKILL 30 s later.
    import signal
    import threading
    import time

    from gpucore.signals import StepBoundaries, exit_code, signal_name

    store = _store(timeout_s=60)
    # A shell's background job starts with SIGINT ignored, which Python and StepBoundaries keep (a test run started
    # with `&` found it so): Ctrl-C's handler as in a terminal's Python, for this test only.
    outer_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.Signals[signum])).start()
    started = time.monotonic()
    try:
        with StepBoundaries().installed(), pytest.raises(KeyboardInterrupt) as stop:  # as the fit loop's, between steps
            distributed.wait_for_keys(store, ["gone"])
    finally:
        signal.signal(signal.SIGINT, outer_sigint)
    assert time.monotonic() - started < 1.3
    assert signal_name(stop.value) == signum and exit_code(signal_name(stop.value)) == 128 + signal.Signals[signum]


def test_a_held_stop_waits_for_a_peer_that_comes_and_leaves_one_that_does_not_after_the_grace():
    # The epoch's end holds a stop (its row, callbacks and checkpoints are written whole), also while the ranks
    # exchange: a peer that comes within signals.HELD_STOP_GRACE_S is awaited and the stop is raised after; one that
    # does not come (dead) is left then, so the rank answers torchrun's SIGTERM long before its SIGKILL.
    import signal
    import threading
    import time

    from gpucore.signals import HELD_STOP_GRACE_S, StepBoundaries, signal_name

    store = _store(timeout_s=60)
    boundaries = StepBoundaries()
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    threading.Timer(0.5, store.set, ("late", "1")).start()
    with boundaries.installed():
        with boundaries.held():
            distributed.wait_for_keys(store, ["late"])  # the peer came: the exchange completed
            assert boundaries.pending == signal.SIGTERM
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt) as stop:
                distributed.wait_for_keys(store, ["gone"])
        waited = time.monotonic() - started
        # Outside a held section a signal was raised when it came: a long wait does not raise it again.
        threading.Timer(HELD_STOP_GRACE_S + 0.3, store.set, ("later", "1")).start()
        distributed.wait_for_keys(store, ["later"])
    assert HELD_STOP_GRACE_S <= waited < HELD_STOP_GRACE_S + 0.5 and signal_name(stop.value) == "SIGTERM"
    assert StepBoundaries.running is None  # installed() leaves no boundaries behind


def test_ranks_vote_on_the_step_boundary_a_stop_signal_stops_them_at(monkeypatch):
    # Two ranks' StepBoundaries and StopVotes on one store, driven by hand as the fit loop drives them (the whole runs
    # are in test_ranks_that_take_sigterm_a_step_apart_...): the first boundary past every vote stops both; a rank
    # whose peer takes no signal stops alone after LONE_STOP_BOUNDARIES boundaries and HELD_STOP_GRACE_S; a boundary
    # only one rank passes never decides; a store that stopped answering stops the rank at once.
    import datetime
    import itertools
    import signal

    from gpucore.signals import HELD_STOP_GRACE_S, LONE_STOP_BOUNDARIES, VOTED_PEER_GRACE_S, StepBoundaries

    store = _store(timeout_s=5)

    def ranks(fit):
        monkeypatch.setattr(distributed, "_EXCHANGES", itertools.repeat(fit))  # as each process would number it
        boundaries = [StepBoundaries(distributed.StopVotes(store, distributed.World(rank, 2))) for rank in range(2)]
        for rank in boundaries:
            rank.holding = True  # an epoch's steps run
        return boundaries

    def stops(boundaries, steps, decide=True):
        try:
            boundaries.raise_pending(steps, decide)
        except KeyboardInterrupt:
            return True
        return False

    first, second = ranks(fit=1)
    for steps in (1, 2):
        assert not stops(first, steps) and not stops(second, steps)
    second.on_signal(signal.SIGTERM, None)  # in step 3: votes for boundary 3
    assert not stops(first, 3) and not stops(second, 3)
    first.on_signal(signal.SIGTERM, None)  # in step 4
    assert not stops(second, 4) and not stops(first, 4, decide=False) and not stops(first, 4)
    assert stops(second, 5) and stops(first, 5)
    # In an exchange at the epoch's end (held): peers that voted too are alive and on their way, so a wait for them
    # lasts up to VOTED_PEER_GRACE_S; for one that took no signal (dead), HELD_STOP_GRACE_S.
    monkeypatch.setattr(StepBoundaries, "running", first)
    first.pending_since -= VOTED_PEER_GRACE_S
    StepBoundaries.raise_held_in_peer_wait(waited_s=VOTED_PEER_GRACE_S - 0.1)
    with pytest.raises(KeyboardInterrupt):
        StepBoundaries.raise_held_in_peer_wait(waited_s=VOTED_PEER_GRACE_S)

    first, second = ranks(fit=2)  # a second fit: the first fit's votes do not count
    second.on_signal(signal.SIGTERM, None)
    assert not any(stops(second, steps) for steps in range(1, 1 + LONE_STOP_BOUNDARIES))
    second.pending_since -= HELD_STOP_GRACE_S  # as if the grace had passed
    assert not stops(second, LONE_STOP_BOUNDARIES, decide=False)  # one boundary more, but only this rank passes it
    monkeypatch.setattr(StepBoundaries, "running", second)
    StepBoundaries.raise_held_in_peer_wait(waited_s=HELD_STOP_GRACE_S - 0.1)
    with pytest.raises(KeyboardInterrupt):
        StepBoundaries.raise_held_in_peer_wait(waited_s=HELD_STOP_GRACE_S)
    assert stops(second, LONE_STOP_BOUNDARIES + 1)
    assert not stops(first, LONE_STOP_BOUNDARIES + 1)  # no signal came to it: it trains on (its next all-reduce fails)

    first, second = ranks(fit=3)  # no forward pre-hook (a compiled model): boundaries at the logs only
    for rank in (first, second):
        rank.every_step = False
        assert not stops(rank, 10)
    second.on_signal(signal.SIGTERM, None)  # in step 14, say: `steps` (10) is behind, so no vote for boundary 11
    assert second.voted_at is None and not stops(first, 20) and not stops(second, 20)  # its vote: boundary 20
    first.on_signal(signal.SIGTERM, None)
    assert not stops(first, 30, decide=False) and not stops(second, 30)  # first's vote: boundary 30
    assert stops(first, 40) and stops(second, 40)

    host = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    client = torch.distributed.TCPStore("127.0.0.1", host.port, 2, is_master=False,
                                        timeout=datetime.timedelta(seconds=1))
    lost = StepBoundaries(distributed.StopVotes(client, distributed.World(1, 2)))
    lost.holding = True
    lost.on_signal(signal.SIGTERM, None)
    assert not stops(lost, 1)  # rank 0 took no signal (yet)
    del host  # rank 0, the store's host, is gone: no collective can succeed
    assert stops(lost, 2)
