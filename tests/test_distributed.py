"""Data parallelism with real processes on CPU (paddle.distributed.launch, gloo)."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import REPO, checkpoint_params, checkpoint_state, losses_of, task_config, write_config
from wenxin.controller.ranks import Ranks

# the launches pick their ports while they start: run them one after another (one xdist worker)
pytestmark = pytest.mark.xdist_group("distributed")


FLOAT16_ON_CPU = """# run_trainer.py with float16 AMP allowed on CPU (see tests/test_static_amp.py)
import runpy, sys
import wenxin.controller.amp as amp
amp.float16_kernels_available = lambda place_type: True
sys.argv[0] = {script!r}
runpy.run_path({script!r}, run_name="__main__")
"""


def launch(tmp_path, config, nproc, float16_on_cpu=False):
    path = write_config(str(tmp_path / f"task_{nproc}.json"), config)
    script = os.path.join(REPO, "run_trainer.py")
    if float16_on_cpu:
        wrapper = tmp_path / "run_trainer_fp16.py"
        wrapper.write_text(FLOAT16_ON_CPU.format(script=script), encoding="utf-8")
        script = str(wrapper)
    if nproc == 1:
        cmd = [sys.executable, script, "--param_path", path]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
               "--log_dir", str(tmp_path / "launch_logs"), script, "--param_path", path]

    def launch_once():
        shutil.rmtree(tmp_path / "launch_logs", ignore_errors=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
                              env={**os.environ, "GLOG_minloglevel": "2"})
        logs = ""
        if nproc > 1 and os.path.isdir(tmp_path / "launch_logs"):
            logs = "".join(open(tmp_path / "launch_logs" / n).read()[-1500:]
                           for n in os.listdir(tmp_path / "launch_logs"))
        return proc, logs

    def clear_output():  # whatever the failed launch began there
        output_path = config.get("trainer", {}).get("output_path")
        if output_path:
            shutil.rmtree(os.path.join(tmp_path, output_path), ignore_errors=True)

    proc, logs = once_more_if_gloo_missed(
        launch_once, lambda result: [result[0].stdout + result[0].stderr + result[1]],
        retry=lambda result: result[0].returncode != 0 and nproc > 1, before_retry=clear_output)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:] + logs


def dev_records(out):
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["tag"] == "dev"]


@pytest.mark.parametrize("mode,accumulate,amp", [("dynamic", 1, False), pytest.param("static", 1, False, marks=pytest.mark.slow),
                                                  pytest.param("dynamic", 2, False, marks=pytest.mark.slow),
                                                  ("static", 2, True)])
def test_two_ranks_equal_one_rank_with_double_batch(tmp_path, data_dir, mode, accumulate, amp):
    """2 ranks x batch B/accumulate x accumulate == 1 rank x batch 2B. The static AMP case runs
    float16 loss scaling with float32 compute: every rank must skip or apply the same steps."""
    def config(out, batch, steps_accumulated=1):
        c = task_config(data_dir, str(tmp_path / out), max_steps=6, eval_step=3, save_model_step=6,
                        is_eval_test=0, train_log_step=1, gradient_accumulation_steps=steps_accumulated)
        c["model"]["dropout"] = 0.0
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        c["dataset_reader"]["train_reader"]["config"]["batch_size"] = batch
        if amp:
            c["trainer"].update(use_amp=True, amp_dtype="float16", init_loss_scaling=1024.0, incr_every_n_steps=2,
                                amp_custom_black_list=["matmul", "matmul_v2", "lookup_table_v2", "embedding"])
        c["dataset_reader"]["dev_reader"]["config"]["batch_size"] = 7  # shards and batches differ
        if mode == "static":
            c["model"]["is_dygraph"] = 0
            c["trainer"]["type"] = "CustomStaticTrainer"
        return c

    launch(tmp_path, config("single", 16), 1, float16_on_cpu=amp)
    launch(tmp_path, config("double", 8 // accumulate, accumulate), 2, float16_on_cpu=amp)
    single = checkpoint_params(tmp_path / "single" / "checkpoints" / "step_6")
    double = checkpoint_params(tmp_path / "double" / "checkpoints" / "step_6")
    for name, value in single.items():
        np.testing.assert_allclose(np.asarray(double[name]), np.asarray(value), atol=1e-5, err_msg=name)
    a, b = dev_records(str(tmp_path / "single")), dev_records(str(tmp_path / "double"))
    # one record per evaluation: only rank 0 writes; metrics are over the whole gathered dev set
    assert [r["step"] for r in a] == [r["step"] for r in b] == [3, 6]
    for ra, rb in zip(a, b):
        assert ra["acc"] == rb["acc"] and ra["f1"] == pytest.approx(rb["f1"])
        assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-5)
    # the logged training loss is the mean over ranks: the loss of the whole 2B examples
    train_a, train_b = losses_of(str(tmp_path / "single")), losses_of(str(tmp_path / "double"))
    assert sorted(train_a) == sorted(train_b) == [1, 2, 3, 4, 5, 6]
    for step, loss in train_a.items():
        assert train_b[step] == pytest.approx(loss, abs=1e-5), step
    # only rank 0 writes train.log: each record once
    lines = open(tmp_path / "double" / "logs" / "train.log", encoding="utf-8").read().splitlines()
    step_lines = [line.split(": ", 1)[1] for line in lines if "[train] step" in line]
    assert len(step_lines) == 6 and len(set(step_lines)) == 6
    if amp:  # the scale doubled every 2 good steps on every rank
        for out in ("single", "double"):
            assert float(checkpoint_state(tmp_path / out / "checkpoints" / "step_6")["scaler"]["scale"][0]) == 8192.0


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_nodes(tmp_path, config, nodes=2, expect_success=True):
    """``nodes`` launchers on this machine, 1 process each, meeting at a master on 127.0.0.1: a
    multi-machine run's commands, with the machines' addresses replaced by this one's. ``config``
    is the task, or a list of one task per node (as each machine may have its own file).

    Paddle's gloo gives two ranks a fixed 30 s to connect while ``fleet.init`` builds its groups,
    and no setting changes it; on a loaded machine two launchers can miss it before any training
    starts. Such a launch is run once more (with a warning); any other failure fails the test,
    showing every rank's output."""
    configs = config if isinstance(config, list) else [config] * nodes
    paths = [write_config(str(tmp_path / f"task_node{rank}.json"), c) for rank, c in enumerate(configs)]
    returncodes, logs, outputs = once_more_if_gloo_missed(lambda: run_launchers(tmp_path, paths),
                                                          lambda result: result[2] + result[1],
                                                          retry=lambda result: expect_success)
    report = "\n".join(f"--- node {rank} (exit {code}) ---\n{out[-1500:]}\n{log[-1500:]}"
                       for rank, (code, out, log) in enumerate(zip(returncodes, outputs, logs)))
    assert all((code == 0) is expect_success for code in returncodes), report
    return logs


def missed_gloo_rendezvous(output: str) -> bool:
    """Whether a launch failed because gloo's ranks missed each other while building a process
    group, before any training: ``fleet.init``'s fixed 30 s ran out (``TIMEOUT``), or a rank that
    had given up first closed its port (``Connection refused``, seen on a machine loaded beyond its
    cores)."""
    building = "init_distributed" in output or "ProcessGroupGloo" in output
    return building and "gloo" in output and ("TIMEOUT" in output or "Connection refused" in output)


def once_more_if_gloo_missed(launch_once, outputs_of, retry, before_retry=lambda: None):
    """``launch_once()``'s result, or, where ``retry(result)`` and an output of ``outputs_of(result)``
    shows gloo's ranks missing each other before training (``missed_gloo_rendezvous``), a warning
    and a second launch's (after ``before_retry()``)."""
    result = launch_once()
    if retry(result) and any(map(missed_gloo_rendezvous, outputs_of(result))):
        warnings.warn("gloo's ranks missed each other while building their groups: launching again", stacklevel=3)
        before_retry()
        result = launch_once()
    return result


def run_launchers(tmp_path, paths):
    """Start one launcher per task file and wait for all: their exit codes, outputs and worker logs."""
    master = f"127.0.0.1:{free_port()}"
    folders = [tmp_path / f"node{rank}_logs" for rank in range(len(paths))]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    procs = [subprocess.Popen([sys.executable, "-m", "paddle.distributed.launch", "--master", master,
                               "--nnodes", str(len(paths)), "--rank", str(rank), "--nproc_per_node", "1",
                               "--log_dir", str(folders[rank]),
                               os.path.join(REPO, "run_trainer.py"), "--param_path", path],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path),
                              env={**os.environ, "GLOG_minloglevel": "2"}) for rank, path in enumerate(paths)]
    try:
        outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    logs = ["".join(open(folder / n).read() for n in sorted(os.listdir(folder)) if n.startswith("workerlog"))
            if folder.is_dir() else "" for folder in folders]
    return [proc.returncode for proc in procs], logs, outputs


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=pytest.mark.slow)])
def test_two_nodes_equal_one_process_with_double_batch(tmp_path, data_dir, mode):
    """Two launchers with --nnodes 2 and a master on 127.0.0.1, one process each, train the same
    parameters as one process with the double batch."""
    def config(out, batch):
        # one CPU thread each: the two "machines" share this one's cores
        c = task_config(data_dir, str(tmp_path / out), max_steps=6, eval_step=3, save_model_step=6,
                        is_eval_test=0, train_log_step=1, cpu_threads=1)
        c["model"]["dropout"] = 0.0
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        c["dataset_reader"]["train_reader"]["config"]["batch_size"] = batch
        if mode == "static":
            c["model"]["is_dygraph"] = 0
            c["trainer"]["type"] = "CustomStaticTrainer"
        return c

    launch(tmp_path, config("single", 16), 1)
    launch_nodes(tmp_path, config("nodes", 8))
    single = checkpoint_params(tmp_path / "single" / "checkpoints" / "step_6")
    nodes = checkpoint_params(tmp_path / "nodes" / "checkpoints" / "step_6")
    for name, value in single.items():
        np.testing.assert_allclose(np.asarray(nodes[name]), np.asarray(value), atol=1e-5, err_msg=name)
    assert [r["acc"] for r in dev_records(str(tmp_path / "nodes"))] == \
        [r["acc"] for r in dev_records(str(tmp_path / "single"))]
    train_a, train_b = losses_of(str(tmp_path / "single")), losses_of(str(tmp_path / "nodes"))
    assert sorted(train_b) == [1, 2, 3, 4, 5, 6]
    for step, loss in train_a.items():
        assert train_b[step] == pytest.approx(loss, abs=1e-5), step
    worker_log = open(tmp_path / "node1_logs" / "workerlog.0", encoding="utf-8").read()
    assert "rank_id: 1" in worker_log and "dp_degree: 2" in worker_log and "[train] step 6" in worker_log
    assert "new best dev" not in worker_log  # only the rank that writes checkpoints says where


@pytest.mark.slow
def test_nodes_that_would_resume_from_different_steps_stop_with_one_error(tmp_path, data_dir):
    """Each "machine" has its own output_path, as on disks that are not shared: node 0 finds a
    checkpoint to resume, node 1 none. Training from both would silently diverge."""
    def config(out, max_steps):
        c = task_config(data_dir, str(tmp_path / out), max_steps=max_steps, save_model_step=3, is_eval_dev=0,
                        is_eval_test=0, resume="auto", cpu_threads=1)
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        return c

    launch(tmp_path, config("machine0", 3), 1)  # machine 0 has checkpoints/step_3
    logs = launch_nodes(tmp_path, [config("machine0", 6), config("machine1", 6)], expect_success=False)
    for log in logs:
        assert "the 2 ranks start from different steps (0 to 3" in log, log[-2000:]
        assert "[train] step 4" not in log and "[train] step 1:" not in log
    assert sorted(os.listdir(tmp_path / "machine0" / "checkpoints")) == ["index.json", "step_3"]  # left as it was


def test_two_ranks_streaming_a_file_equal_one_rank_with_double_batch(tmp_path, data_dir):
    """A streamed train reader deals the rows of its seeded order to the ranks (row i to rank
    i % 2), so 2 ranks x batch 8 read the same 16 rows a step as 1 rank x batch 16, none twice; a
    second epoch (15 steps of 16 of 240 rows) reshuffles on both the same way."""
    def config(out, batch):
        c = task_config(data_dir, str(tmp_path / out), max_steps=20, save_model_step=20, is_eval_dev=0,
                        is_eval_test=0, train_log_step=1, cpu_threads=1)
        c["model"]["dropout"] = 0.0
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        c["dataset_reader"]["train_reader"]["config"].update(batch_size=batch, streaming=True, shuffle_buffer=50)
        return c

    launch(tmp_path, config("single", 16), 1)
    launch(tmp_path, config("double", 8), 2)
    single = checkpoint_params(tmp_path / "single" / "checkpoints" / "step_20")
    double = checkpoint_params(tmp_path / "double" / "checkpoints" / "step_20")
    for name, value in single.items():
        np.testing.assert_allclose(np.asarray(double[name]), np.asarray(value), atol=1e-5, err_msg=name)
    train_a, train_b = losses_of(str(tmp_path / "single")), losses_of(str(tmp_path / "double"))
    assert sorted(train_b) == list(range(1, 21))
    for step, loss in train_a.items():
        assert train_b[step] == pytest.approx(loss, abs=1e-5), step


@pytest.mark.slow
def test_all_ranks_resume_from_the_same_checkpoint(tmp_path, data_dir):
    def config(out, max_steps, resume="none"):
        c = task_config(data_dir, str(tmp_path / out), max_steps=max_steps, save_model_step=3,
                        is_eval_dev=0, is_eval_test=0, resume=resume)
        c["model"]["dropout"] = 0.0
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        return c

    launch(tmp_path, config("straight", 6), 2)
    launch(tmp_path, config("resumed", 3), 2)
    launch(tmp_path, config("resumed", 6, resume="auto"), 2)  # both ranks load checkpoints/step_3
    straight = checkpoint_params(tmp_path / "straight" / "checkpoints" / "step_6")
    resumed = checkpoint_params(tmp_path / "resumed" / "checkpoints" / "step_6")
    for name, value in straight.items():
        np.testing.assert_allclose(np.asarray(resumed[name]), np.asarray(value), atol=1e-6, err_msg=name)
    log = "".join(open(tmp_path / "launch_logs" / n).read() for n in os.listdir(tmp_path / "launch_logs"))
    assert log.count("resumed from") >= 2  # every rank restored the checkpoint


def test_micro_batches_do_not_all_reduce(tmp_path, data_dir):
    """Eager data parallelism with accumulation: every micro-batch but the last runs under the
    model's ``no_sync()`` (the test replaces the distributed model by a recorder)."""
    import contextlib
    from conftest import build
    trainer = build(task_config(data_dir, str(tmp_path / "out"), max_steps=1, is_eval_dev=0, is_eval_test=0,
                                gradient_accumulation_steps=3), tmp_path)
    engine = trainer.engine
    model, entered = engine.train_model, []

    class Recorder:
        def __call__(self, *args):
            return model(*args)

        @contextlib.contextmanager
        def no_sync(self):
            entered.append(trainer.state.global_step)
            yield

    engine.train_model = engine.step.train_model = Recorder()
    trainer.world_size = 2
    engine.step.rule = dataclasses.replace(engine.step.rule, world_size=2)
    trainer.ranks = Ranks(0, 1)  # no collective in this single process
    trainer.should_check_loss = lambda: False  # no collective in this single process
    trainer.do_train()
    assert entered == [0, 0]  # micro-batches 1 and 2 of step 1; the 3rd all-reduces


@pytest.mark.parametrize("mode,lora", [pytest.param("dynamic", True, marks=pytest.mark.slow),
                                       pytest.param("dynamic", False, marks=pytest.mark.slow),
                                       ("static", True)])
def test_sft_on_two_ranks_equals_one_rank_with_double_batch(tmp_path, mode, lora):
    """ERNIE 4.5 SFT (issue 40) under paddle.distributed.launch on CPU: 2 ranks x batch B ==
    1 rank x batch 2B. Each rank averages over its own answer tokens, so the
    conversations here all have as many answer tokens (then the mean of the ranks' means is the
    mean over the whole batch)."""
    pytest.importorskip("sentencepiece")
    import collections
    from test_chat_sft import conversations, field, sft_config, write_jsonl
    from wenxin.data.chat_fields import ChatFieldReader
    reader = ChatFieldReader(field(max_seq_len=400), "f")
    by_answer_tokens = collections.defaultdict(list)
    for row in conversations(2000, 9):
        by_answer_tokens[int(reader.convert(json.dumps(row, ensure_ascii=False))[1].sum())].append(row)
    rows = max(by_answer_tokens.values(), key=len)[:64]
    data = str(tmp_path / "data")
    write_jsonl(os.path.join(data, "train.jsonl"), rows)
    write_jsonl(os.path.join(data, "dev.jsonl"), rows[:8])

    def config(out, batch):
        c = sft_config(data, str(tmp_path / out), mode, max_steps=4, save_model_step=4, is_eval_dev=0,
                       train_log_step=1)
        c["dataset_reader"]["train_reader"]["config"].update(batch_size=batch, shuffle=False)
        c["model"]["optimization"] = {"optimizer": "sgd", "learning_rate": 0.5, "lr_scheduler": "constant"}
        if lora:
            c["model"]["lora"] = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]}
        return c
    launch(tmp_path, config("single", 8), 1)
    launch(tmp_path, config("double", 4), 2)
    single = checkpoint_params(tmp_path / "single" / "checkpoints" / "step_4")
    double = checkpoint_params(tmp_path / "double" / "checkpoints" / "step_4")
    assert sorted(single) == sorted(double) and all(n.endswith(("lora_A", "lora_B")) for n in single) == lora
    for name, value in single.items():
        np.testing.assert_allclose(np.asarray(double[name]), np.asarray(value), atol=2e-5, err_msg=name)
    train_a, train_b = losses_of(str(tmp_path / "single")), losses_of(str(tmp_path / "double"))
    assert sorted(train_a) == sorted(train_b) == [1, 2, 3, 4]
    for step, loss in train_a.items():
        assert train_b[step] == pytest.approx(loss, abs=1e-5), step
