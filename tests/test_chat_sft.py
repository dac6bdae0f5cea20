"""Supervised fine-tuning of an ERNIE 4.5 decoder on conversations (issue 40): the ERNIEKit SFT
data format, answers-only loss, packing with attention kept inside each conversation, and
training from a task file in both graph modes with exact resume."""
import json
import os
import random

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

import paddle  # noqa: E402

from conftest import build, losses_in_both_modes, losses_of, resumed_run_matches_reference, run_script, write_config, write_jsonl  # noqa: E402
from wenxin.common.errors import ConfigError, DataError  # noqa: E402
from wenxin.data.chat_fields import IGNORED, ChatFieldReader, Conversation  # noqa: E402
from wenxin.models.ernie45 import load_ernie45  # noqa: E402

FOLDER = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45", "tied")
QUESTIONS = ["今天天气很好吗？", "what is machine learning", "请问你是谁", "数字 123 和 456", "hello world",
             "学习率太大会怎样？", "the quick brown fox", "自然语言处理是什么"]
ANSWERS = ["很好，我们一起去公园散步吧。", "models learn from data", "我是文心大模型", "它们的和是 579",
           "你好 world", "会发散，太小会很慢", "jumps over the lazy dog", "人工智能的重要方向"]


def conversations(n: int, seed: int):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        turns = rng.randint(1, 3)
        row = {"src": [rng.choice(QUESTIONS) for _ in range(turns)], "tgt": [rng.choice(ANSWERS) for _ in range(turns)]}
        if i % 3 == 0:
            row["system"] = "你是一个生活小助理"
        if turns > 1 and i % 2:
            row["label"] = [0] * (turns - 1) + [1]
        rows.append(row)
    return rows


def field(max_seq_len=160, packing=True, name="conversation"):
    return {"name": name, "reader": {"type": "ChatFieldReader"}, "model_dir": FOLDER, "max_seq_len": max_seq_len,
            "packing": packing}


def sft_config(data_dir, output, mode="dynamic", packing=True, **trainer):
    def reader(name, shuffle, batch):
        return {"name": f"{name}_reader", "type": "BasicDataSetReader", "fields": [field(packing=packing)],
                "config": {"data_path": os.path.join(data_dir, f"{name}.jsonl"), "format": "jsonl",
                           "shuffle": shuffle, "batch_size": batch}}
    config = {"task": "chat",
              "dataset_reader": {"train_reader": reader("train", True, 6), "dev_reader": reader("dev", False, 8)},
              "model": {"type": "Ernie45SFT", "is_dygraph": 1 if mode == "dynamic" else 0, "model_dir": FOLDER,
                        "optimization": {"learning_rate": 3e-3, "warmup_steps": 2, "max_grad_norm": 1.0,
                                         "weight_decay": 0.01}},
              "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                          "epoch": 2, "train_log_step": 1, "is_eval_dev": 1, "output_path": output,
                          "visualdl": False, "metric": "loss", "metric_mode": "min"}}
    config["trainer"].update(trainer)
    return config


@pytest.fixture
def sft_data(tmp_path):
    folder = str(tmp_path / "data")
    write_jsonl(os.path.join(folder, "train.jsonl"), conversations(36, seed=1))
    write_jsonl(os.path.join(folder, "dev.jsonl"), conversations(8, seed=2))
    return folder


def test_erniekit_and_alpaca_objects_read_as_conversations():
    c = Conversation.from_json(json.dumps({"system": "s", "src": ["q1", "q2"], "tgt": ["a1", "a2"], "label": [0, 1]}))
    assert (c.system, c.turns, c.learn) == ("s", [("q1", "a1"), ("q2", "a2")], [False, True])
    a = Conversation.from_json(json.dumps({"instruction": "翻译：", "input": "hello", "output": "你好",
                                           "history": [["hi", "嗨"]]}))
    assert (a.system, a.turns, a.learn) == (None, [("hi", "嗨"), ("翻译：hello", "你好")], [True, True])
    for bad, message in [("[1]", "not a conversation"), ('{"src": ["q", "r"], "tgt": []}', "as many"),
                         ('{"src": ["q"], "tgt": ["a"], "label": [2]}', "label"),
                         ('{"src": "q", "tgt": ["a"], "system": 3}', "system"), ('{"text": "x"}', "neither"),
                         ('{"src": [1], "tgt": ["a"]}', "src: expected a list of strings"), ("{", "not a JSON")]:
        with pytest.raises(ValueError, match=message):
            Conversation.from_json(bad)


def test_labels_are_the_next_answer_tokens_and_packing_keeps_conversations_apart():
    reader = ChatFieldReader(field(max_seq_len=160), "dataset_reader.train_reader.fields[0]")
    rows = conversations(7, seed=3)
    values = [reader.convert(json.dumps(row, ensure_ascii=False)) for row in rows]
    batch = reader.collate(values)
    ids, labels, segments, positions = (batch[f"conversation{s}"] for s in ("", "_labels", "_segments", "_positions"))
    assert ids.shape[0] < len(values)  # packed
    seen = 0
    for r in range(ids.shape[0]):
        for s in range(1, segments[r].max() + 1):
            where = np.flatnonzero(segments[r] == s)
            tokens, learn = values[seen]
            seen += 1
            assert where.tolist() == list(range(where[0], where[0] + len(tokens)))  # contiguous
            np.testing.assert_array_equal(ids[r, where], tokens)
            np.testing.assert_array_equal(positions[r, where], np.arange(len(tokens)))
            expected = [int(tokens[t + 1]) if learn[t + 1] else IGNORED for t in range(len(tokens) - 1)] + [IGNORED]
            np.testing.assert_array_equal(labels[r, where], expected)
    assert seen == len(values) and ids.shape[1] <= 160
    unpacked = ChatFieldReader(field(max_seq_len=160, packing=False), "f").collate(values)
    assert unpacked["conversation"].shape[0] == len(values)


def test_a_packed_row_gives_each_conversation_the_logits_it_has_alone():
    model = load_ernie45(FOLDER)
    model.eval()
    reader = ChatFieldReader(field(max_seq_len=160), "f")
    values = [reader.convert(json.dumps(row, ensure_ascii=False)) for row in conversations(5, seed=4)]
    batch = {k: paddle.to_tensor(v) for k, v in reader.collate(values).items()}
    assert batch["conversation"].shape[0] < len(values)
    with paddle.no_grad():
        packed = model(batch["conversation"], positions=batch["conversation_positions"],
                       segments=batch["conversation_segments"]).numpy()
        segments = batch["conversation_segments"].numpy()
        seen = 0
        for r in range(segments.shape[0]):
            for s in range(1, segments[r].max() + 1):
                alone = model(paddle.to_tensor(values[seen][0][None].astype("int64"))).numpy()[0]
                np.testing.assert_allclose(packed[r, segments[r] == s], alone, atol=2e-5, rtol=1e-5)
                seen += 1


def test_long_conversations_keep_their_first_turns_and_bad_lines_name_file_and_line(tmp_path, sft_data):
    reader = ChatFieldReader(field(max_seq_len=100), "f")
    long_row = {"src": ["今天天气很好吗？"] * 4, "tgt": ["很好，我们一起去公园散步吧。"] * 4}
    ids, learn = reader.convert(json.dumps(long_row, ensure_ascii=False))
    one_turn, _ = reader.convert(json.dumps({"src": long_row["src"][:1], "tgt": long_row["tgt"][:1]},
                                            ensure_ascii=False))
    assert len(one_turn) < len(ids) <= 100 and ids[:len(one_turn)].tolist() == one_turn.tolist()
    with pytest.raises(ValueError, match="the first turn alone"):
        ChatFieldReader(field(max_seq_len=8), "f").convert(json.dumps(long_row, ensure_ascii=False))
    with pytest.raises(ValueError, match="teaches nothing"):
        reader.convert(json.dumps({"src": ["q"], "tgt": ["a"], "label": [0]}))
    bad = write_jsonl(os.path.join(sft_data, "train.jsonl"), conversations(4, 5) + ['{"src": ["q"]}'])
    with pytest.raises(DataError, match=rf"{bad}:5: a prompt, its last question without an answer"):
        build(sft_config(sft_data, str(tmp_path / "out")), tmp_path)


def test_a_missing_model_dir_is_one_error_naming_the_key(tmp_path, sft_data):
    config = sft_config(sft_data, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["fields"][0]["model_dir"] = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"train_reader.fields\[0\].model_dir: folder not found: .*nowhere; download the model"):
        build(config, tmp_path)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_sft_trains_from_a_task_file_and_the_loss_falls(tmp_path, sft_data, mode):
    out = str(tmp_path / "out")
    path = write_config(str(tmp_path / "task.json"), sft_config(sft_data, out, mode, epoch=4))
    result = run_script(tmp_path, ["--param_path", path])
    assert result.returncode == 0, result.stderr[-3000:]
    losses = losses_of(out)
    steps = sorted(losses)
    assert len(steps) >= 8
    first, last = np.mean([losses[s] for s in steps[:3]]), np.mean([losses[s] for s in steps[-3:]])
    assert last < 0.8 * first, (first, last)
    assert "loaded" in result.stderr and "parameters from" in result.stderr


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_eager_and_static_sft_give_the_same_losses(tmp_path, sft_data, lora):
    """Full fine-tuning and LoRA (its adapters drawn alike in both modes, issue 56) give the same
    losses in eager and static mode."""
    def config(mode, out):
        c = sft_config(sft_data, out, mode, epoch=1, is_eval_dev=0)
        if lora:
            c["model"]["lora"] = {**LORA, "dropout": 0.0}
        return c
    assert len(losses_in_both_modes(tmp_path, config)) >= 5


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=pytest.mark.slow)])
def test_sft_resumes_exactly_after_sigkill(tmp_path, sft_data, mode):
    steps = 24

    def config(out):
        return sft_config(sft_data, out, mode, max_steps=steps, epoch=10, save_model_step=3, keep_checkpoint_max=2,
                          train_log_step=1000, is_eval_dev=0, resume="auto")
    params = resumed_run_matches_reference(tmp_path, config, steps, random.Random(40))
    assert "model.layers.0.self_attn.q_proj.weight" in params


LORA = {"rank": 4, "alpha": 8.0, "dropout": 0.1, "target_modules": ["q_proj", "v_proj", "gate_proj"]}


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=pytest.mark.slow)])
def test_lora_sft_trains_only_adapters_checkpoints_only_them_and_resumes_exactly(tmp_path, sft_data, mode):
    from wenxin.models.ernie45 import Ernie45Config
    steps = 18

    def config(out):
        c = sft_config(sft_data, out, mode, max_steps=steps, epoch=10, save_model_step=3, keep_checkpoint_max=2,
                       train_log_step=1, is_eval_dev=0, resume="auto")
        c["model"]["lora"] = dict(LORA)
        c["model"]["optimization"]["learning_rate"] = 2e-2
        return c
    params = resumed_run_matches_reference(tmp_path, config, steps, random.Random(41))
    losses = losses_of(str(tmp_path / "reference"))
    assert np.mean([losses[s] for s in range(steps - 2, steps + 1)]) < 0.9 * np.mean([losses[s] for s in (1, 2, 3)])
    layers = Ernie45Config.from_folder(FOLDER).num_hidden_layers
    assert sorted(params) == sorted(f"model.layers.{i}.{part}.{adapter}" for i in range(layers)
                                    for part in ("self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj")
                                    for adapter in ("lora_A", "lora_B"))
    assert all(np.abs(np.asarray(v)).max() > 0 for k, v in params.items() if k.endswith("lora_B"))


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_lora_leaves_the_decoder_weights_as_the_folder_has_them(tmp_path, sft_data, mode):
    from wenxin.models.ernie45 import Ernie45Config, paddle_layout_weights
    config = sft_config(sft_data, str(tmp_path / "out"), mode, max_steps=4, is_eval_dev=0)
    config["model"]["lora"] = dict(LORA)
    trainer = build(config, tmp_path)
    trainer.do_train()
    state = trainer.engine.model_state_dict()
    folder = paddle_layout_weights(FOLDER, Ernie45Config.from_folder(FOLDER))
    assert set(folder) < set(state)
    for name, value in folder.items():
        np.testing.assert_array_equal(np.asarray(state[name]), value, err_msg=name)
    assert any(np.abs(np.asarray(state[name])).max() > 0 for name in state if name.endswith("lora_B"))


def test_recompute_is_a_trainer_switch_with_the_same_losses(tmp_path, sft_data):
    losses = {}
    for recompute in (False, True):
        out = str(tmp_path / f"r{recompute}")
        config = sft_config(sft_data, out, max_steps=5, is_eval_dev=0, recompute=recompute)
        config["model"]["lora"] = dict(LORA)
        build(config, tmp_path).do_train()
        losses[recompute] = losses_of(out)
    assert losses[True] == losses[False] and len(losses[True]) == 5
    config = sft_config(sft_data, str(tmp_path / "static"), "static", recompute=True)
    with pytest.raises(ConfigError, match=r"trainer.step.recompute: eager mode only"):
        build(config, tmp_path)


def test_recompute_on_a_model_without_it_names_the_key(tmp_path, data_dir):
    from conftest import task_config
    with pytest.raises(ConfigError, match=r"trainer.step.recompute: BowClassification does not offer recompute"):
        build(task_config(data_dir, str(tmp_path / "out"), recompute=True), tmp_path)


def test_the_token_cache_converts_again_when_the_tokenizer_files_change(tmp_path, sft_data):
    import shutil
    folder = tmp_path / "model"
    shutil.copytree(FOLDER, folder)
    config = sft_config(sft_data, str(tmp_path / "out"), max_steps=1, is_eval_dev=0)
    for name in ("train_reader", "dev_reader"):
        reader = config["dataset_reader"][name]
        reader["fields"][0]["model_dir"] = str(folder)
        reader["config"].update(cache=True, cache_dir=str(tmp_path / "cache"))
    config["model"]["model_dir"] = str(folder)
    first = build(config, tmp_path).readers["train_reader"]
    ids = [np.asarray(first.examples[i][0][0]).tolist() for i in range(len(first))]
    settings = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
    settings["cls_token"] = "<mask:0>"  # another start-of-conversation token: other ids
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), "utf-8")
    again = build(config, tmp_path).readers["train_reader"]
    assert [np.asarray(again.examples[i][0][0]).tolist()[1:] for i in range(len(again))] == [i[1:] for i in ids]
    assert all(np.asarray(again.examples[i][0][0])[0] != ids[i][0] for i in range(len(again)))


def test_a_line_holding_a_lone_surrogate_is_a_bad_line_not_a_tokenizer_crash(tmp_path, capsys):
    """JSON's ``\\ud800`` alone decodes to no character; SentencePiece raised on it (issue 67). It is
    a bad line naming ``file:line`` in ``inspect`` and ``train``, which ``skip_bad_lines`` skips."""
    from conftest import assert_one_error_block
    from wenxin.cli import main
    data = str(tmp_path / "data")
    rows = conversations(12, seed=1)
    rows.insert(4, '{"src": ["fine", "bad \\ud800 text"], "tgt": ["ok", "no"]}')
    write_jsonl(os.path.join(data, "train.jsonl"), rows)
    write_jsonl(os.path.join(data, "dev.jsonl"), conversations(4, seed=2))
    config = sft_config(data, str(tmp_path / "out"), max_steps=1, is_eval_dev=0)
    task = write_config(str(tmp_path / "task.json"), config)
    for command in ("inspect", "train"):
        code = main([command, "--param_path", task])
        captured = capsys.readouterr()
        assert_one_error_block(code, captured.out, captured.err, "train.jsonl:5: key 'src'[1] holds an unpaired "
                                                                 "surrogate")
    config["dataset_reader"]["train_reader"]["config"]["skip_bad_lines"] = True
    assert main(["train", "--param_path", write_config(str(tmp_path / "task.json"), config)]) == 0
    assert "1 malformed line" in capsys.readouterr().err
