"""DPO of an ERNIE 4.5 decoder (issue 40): ERNIEKit's preference format, the loss against its
closed form computed from separate forward passes, the frozen reference, and training from a task
file in both graph modes with exact resume."""
import json
import os
import random

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

import paddle  # noqa: E402

from conftest import build, losses_in_both_modes, losses_of, resumed_run_matches_reference, write_jsonl  # noqa: E402
from wenxin.common.errors import ConfigError  # noqa: E402
from wenxin.data.chat_fields import PreferenceFieldReader, PreferencePair  # noqa: E402
from wenxin.data.chat_format import encode_conversation  # noqa: E402
from wenxin.models.ernie45 import load_ernie45  # noqa: E402

FOLDER = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45", "untied")
GOOD = ["使用节水装置。", "very helpful answer", "我是文心大模型", "数字的和是 579"]
BAD = ["不知道", "no", "再见", "123"]


def pairs(n, seed):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        turns = rng.randint(1, 2)
        row = {"src": [rng.choice(["你好。", "我们如何减少用水？", "hello", "请问你是谁"]) for _ in range(turns)],
               "tgt": ["你好呀，我是你的生活小助理。"] * (turns - 1),
               "response": [[rng.choice(GOOD)], [rng.choice(BAD)]], "sort": [1, 0]}
        if i % 2:
            row["response"].reverse()
            row["sort"] = [0, 1]
        if i % 3 == 0:
            row["system"] = "你是一个生活小助理"
        rows.append(row)
    return rows


def field():
    return {"name": "pair", "reader": {"type": "PreferenceFieldReader"}, "model_dir": FOLDER, "max_seq_len": 160}


def dpo_config(data_dir, output, mode="dynamic", lora=True, **trainer):
    def reader(name, shuffle, batch):
        return {"name": f"{name}_reader", "type": "BasicDataSetReader", "fields": [field()],
                "config": {"data_path": os.path.join(data_dir, f"{name}.jsonl"), "format": "jsonl",
                           "shuffle": shuffle, "batch_size": batch}}
    config = {"task": "chat",
              "dataset_reader": {"train_reader": reader("train", True, 4), "dev_reader": reader("dev", False, 4)},
              "model": {"type": "Ernie45DPO", "is_dygraph": 1 if mode == "dynamic" else 0, "model_dir": FOLDER,
                        "beta": 0.5, "optimization": {"learning_rate": 2e-2 if lora else 3e-3, "warmup_steps": 0}},
              "trainer": {"type": "CustomDynamicTrainer" if mode == "dynamic" else "CustomStaticTrainer",
                          "epoch": 3, "train_log_step": 1, "is_eval_dev": 1, "output_path": output,
                          "visualdl": False, "metric": "reward_acc", "metric_mode": "max"}}
    if lora:
        config["model"]["lora"] = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "up_proj"]}
    config["trainer"].update(trainer)
    return config


@pytest.fixture
def dpo_data(tmp_path):
    folder = str(tmp_path / "data")
    write_jsonl(os.path.join(folder, "train.jsonl"), pairs(16, seed=1))
    write_jsonl(os.path.join(folder, "dev.jsonl"), pairs(8, seed=2))
    return folder


def test_erniekit_preference_lines_give_the_best_and_worst_response():
    pair = PreferencePair.from_json(json.dumps({
        "system": "你是一个生活小助理", "src": ["你好。", "哪一个富含蛋白质，床还是墙？"], "tgt": ["你好呀。"],
        "response": [["床和墙都不是蛋白质的来源。"], ["对不起，我无法回答。"]], "sort": [1, 0]}, ensure_ascii=False))
    assert pair.history == [("你好。", "你好呀。")] and pair.question == "哪一个富含蛋白质，床还是墙？"
    assert (pair.chosen, pair.rejected) == ("床和墙都不是蛋白质的来源。", "对不起，我无法回答。")
    three = PreferencePair.from_json(json.dumps({"src": ["q"], "response": ["a", "b", "c"], "sort": [2, 5, 1]}))
    assert (three.chosen, three.rejected) == ("b", "c")
    for bad, message in [({"src": ["q"], "tgt": ["x"], "response": ["a", "b"], "sort": [1, 0]}, "one answer fewer"),
                         ({"src": ["q"], "response": ["a"], "sort": [1]}, "at least two"),
                         ({"src": ["q"], "response": ["a", "b"], "sort": [1]}, "sort: expected one number"),
                         ({"src": ["q"], "response": ["a", "b"], "sort": [1, 1]}, "none is preferred"),
                         ({"src": ["q"], "response": [["a", "b"], "c"], "sort": [1, 0]}, r"response\[0\]")]:
        with pytest.raises(ValueError, match=message):
            PreferencePair.from_json(json.dumps(bad))


def test_pair_rows_hold_the_chosen_then_the_rejected_conversation_and_learn_only_the_last_answer():
    reader = PreferenceFieldReader(field(), "f")
    tokenizer = reader.tokenizer
    row = pairs(2, seed=3)[1]
    pair = PreferencePair.from_json(json.dumps(row, ensure_ascii=False))
    value = reader.convert(json.dumps(row, ensure_ascii=False))
    batch = reader.collate([value])
    assert batch["pair"].shape[0] == 2
    for r, answer in enumerate((pair.chosen, pair.rejected)):
        expected = encode_conversation(tokenizer, pair.system, pair.history + [(pair.question, answer)],
                                       [False] * len(pair.history) + [True])
        length = len(expected.ids)
        assert batch["pair"][r, :length].tolist() == expected.ids
        learned = [t for t in batch["pair_labels"][r] if t != -100]
        assert learned == tokenizer.encode(answer) + [tokenizer.special_ids["sep_token"]]
    with pytest.raises(ConfigError, match=r"f.packing: preference pairs are not packed"):
        PreferenceFieldReader({**field(), "packing": True}, "f")


def first_pairs(trainer, n):
    """The train reader's first ``n`` pairs: their converted values and their collated batch."""
    reader = trainer.readers["train_reader"]
    values = [reader.examples[i][0] for i in range(n)]
    return values, {k: paddle.to_tensor(v) for k, v in reader.fields[0].collate(values).items()}


def numpy_log_prob(model, ids, learn):
    """The closed form's pieces: a conversation's answer tokens' log-probabilities, summed, from a
    forward pass of that conversation alone and a numpy log-softmax."""
    with paddle.no_grad():
        logits = model(paddle.to_tensor(np.asarray(ids, dtype="int64")[None])).numpy()[0].astype(np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    return sum(log_probs[t, ids[t + 1]] for t in range(len(ids) - 1) if learn[t + 1])


@pytest.mark.parametrize("lora", [True, False])
def test_the_loss_equals_the_closed_form_on_a_small_case(tmp_path, dpo_data, lora):
    from wenxin.models.lora import merged_adapters
    trainer = build(dpo_config(dpo_data, str(tmp_path / "out"), lora=lora), tmp_path)
    model = trainer.model
    rng = np.random.RandomState(5)
    with paddle.no_grad():  # move the policy away from the reference
        for name, parameter in model.named_parameters():
            if (name.endswith("lora_B") if lora else name.startswith("model.layers.0.mlp")):
                parameter.set_value(parameter.numpy() + rng.normal(0, 0.05, parameter.shape).astype("float32"))
    values, batch = first_pairs(trainer, 3)
    model.eval()
    with paddle.no_grad():
        outputs = model(batch, "training")
    beta = 0.5
    reference = load_ernie45(FOLDER)
    policy = load_ernie45(FOLDER)
    state = {name: parameter for name, parameter in model.named_parameters()}
    context = merged_adapters(model) if lora else None
    if context is not None:
        context.__enter__()
    try:
        for name, parameter in policy.named_parameters():
            parameter.set_value(state[name].numpy())
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    losses, wins = [], 0
    for chosen_ids, chosen_learn, rejected_ids, rejected_learn in values:
        margin = beta * ((numpy_log_prob(policy, chosen_ids, chosen_learn)
                          - numpy_log_prob(reference, chosen_ids, chosen_learn))
                         - (numpy_log_prob(policy, rejected_ids, rejected_learn)
                            - numpy_log_prob(reference, rejected_ids, rejected_learn)))
        losses.append(np.log1p(np.exp(-margin)))  # -log sigmoid(margin)
        wins += margin > 0
    assert abs(float(outputs["loss"]) - np.mean(losses)) < 1e-4 * max(1.0, np.mean(losses)), (outputs["loss"], losses)
    assert float(outputs["reward_wins"]) == wins and np.mean(losses) != pytest.approx(np.log(2), abs=1e-3)


def test_at_the_start_the_policy_is_the_reference_so_the_loss_is_log_2(tmp_path, dpo_data):
    trainer = build(dpo_config(dpo_data, str(tmp_path / "out"), lora=False), tmp_path)
    _, batch = first_pairs(trainer, 4)
    with paddle.no_grad():
        assert float(trainer.model(batch, "training")["loss"]) == pytest.approx(np.log(2), abs=1e-6)


@pytest.mark.parametrize("mode,lora", [("dynamic", True), pytest.param("static", True, marks=pytest.mark.slow),
                                       pytest.param("dynamic", False, marks=pytest.mark.slow)])
def test_dpo_trains_from_a_task_file_and_resumes_exactly(tmp_path, dpo_data, mode, lora):
    steps = 12

    def config(out):
        return dpo_config(dpo_data, out, mode, lora=lora, max_steps=steps, epoch=10, save_model_step=3,
                          keep_checkpoint_max=2, is_eval_dev=0, resume="auto")
    params = resumed_run_matches_reference(tmp_path, config, steps, random.Random(42), runs=2)
    losses = losses_of(str(tmp_path / "reference"))
    assert losses[1] == pytest.approx(np.log(2), abs=1e-5)
    assert np.mean([losses[s] for s in range(steps - 3, steps + 1)]) < 0.6
    assert not any(name.startswith("reference") for name in params)
    assert all(name.endswith(("lora_A", "lora_B")) for name in params) == lora


def test_eager_and_static_lora_dpo_give_the_same_losses(tmp_path, dpo_data):
    """Issue 56: LoRA's adapters are drawn alike in both graph modes, so DPO's losses agree."""
    losses = losses_in_both_modes(
        tmp_path, lambda mode, out: dpo_config(dpo_data, out, mode, lora=True, max_steps=6, is_eval_dev=0))
    assert len(losses) == 6
