"""The chat examples (issue 40): the data preparation from chatterbot-corpus, the from-scratch SFT
example end to end (slow), and the ERNIE-4.5-0.3B LoRA recipe's task file run on the test
fixture's decoder."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_script

pytest.importorskip("sentencepiece")
PREPARE = os.path.join(REPO, "examples", "prepare_chat_data.py")
FIXTURE = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory):
    pytest.importorskip("chatterbot_corpus", reason="the example's conversations come from chatterbot-corpus")
    folder = tmp_path_factory.mktemp("chat")
    subprocess.run([sys.executable, PREPARE, "--output", str(folder)], check=True, capture_output=True)
    return folder


def test_the_conversations_are_erniekit_lines_and_the_model_folder_loads(chat_data, tmp_path):
    from wenxin.data.chat_fields import ChatFieldReader, Conversation
    from wenxin.models.ernie45 import Ernie45Config
    rows = {name: (chat_data / f"{name}.jsonl").read_text("utf-8").splitlines() for name in ("train", "dev")}
    assert len(rows["train"]) > 300 and len(rows["dev"]) > 30 and not set(rows["train"]) & set(rows["dev"])
    conversations = [Conversation.from_json(line) for line in rows["train"]]
    assert all(c.system and c.system.startswith("话题：") and c.turns and all(c.learn) for c in conversations)
    assert any(len(c.turns) > 1 for c in conversations)  # multi-turn ones too
    config = Ernie45Config.from_folder(str(chat_data / "model"))
    reader = ChatFieldReader({"name": "c", "model_dir": str(chat_data / "model"), "max_seq_len": 512}, "f")
    assert reader.tokenizer.vocab_size == config.vocab_size
    ids, _ = reader.convert(rows["train"][0])
    assert reader.tokenizer.decode(ids).startswith("<|begin_of_sentence|>话题：")
    again = tmp_path / "again"
    subprocess.run([sys.executable, PREPARE, "--output", str(again)], check=True, capture_output=True)
    assert (again / "train.jsonl").read_bytes() == (chat_data / "train.jsonl").read_bytes()
    again_reader = ChatFieldReader({"name": "c", "model_dir": str(again / "model"), "max_seq_len": 512}, "f")
    assert all(again_reader.convert(r)[0].tolist() == reader.convert(r)[0].tolist() for r in rows["dev"])


@pytest.mark.slow
def test_the_chat_example_learns_its_conversations_and_answers_them(chat_data, tmp_path):
    out = str(tmp_path / "out")
    model = str(chat_data / "model")
    overrides = [f"dataset_reader.{r}_reader.config.data_path={chat_data}/{r}.jsonl" for r in ("train", "dev")]
    overrides += [f"dataset_reader.{r}_reader.fields.0.model_dir={model}" for r in ("train", "dev")]
    overrides += [f"model.model_dir={model}", f"trainer.output_path={out}"]
    proc = run_script(tmp_path, ["--param_path", os.path.join(REPO, "examples", "chat_sft_ernie45.json"),
                                 *[a for o in overrides for a in ("--set", o)]])
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "logs", "metrics.jsonl"), encoding="utf-8") as f:
        losses = [r["loss"] for r in map(json.loads, f) if r["tag"] == "train"]
    assert losses[-1] < 0.3 < losses[0]
    lines = (chat_data / "train.jsonl").read_text("utf-8").splitlines()[:20]
    prompts = [first_turn(line) for line in lines if len(json.loads(line)["src"]) == 1]
    answers = [json.loads(line)["tgt"][0] for line in lines if len(json.loads(line)["src"]) == 1]
    unseen = [first_turn(line) for line in (chat_data / "dev.jsonl").read_text("utf-8").splitlines()]
    best = os.path.join(out, "checkpoints", "best")
    got = predicted(tmp_path, best, prompts + unseen)
    # many answers come back word for word: measured 15 of 20 on an AVX2 CPU and 10 of 20 on an
    # AVX-512 one (the same code before and after issue 69's changes: training's rounding follows the
    # CPU's kernels); the corpus asks some questions twice with different answers, and a small model
    # trained for minutes mixes up or ends early a few others. After one training step it gets 0 of 20.
    assert sum(g == a for g, a in zip(got, answers)) >= 0.4 * len(answers), list(zip(got, answers))

    # int8 (issue 69): the export converted to ONNX Runtime, its int8 copy's greedy answers against
    # float32's on Paddle, word for word: measured 64 of 66 (these 20 training prompts and the 46
    # unseen ones; 84 of 86 with 40 training prompts) on an AVX-512 CPU. On AVX2, ONNX Runtime's int8
    # products add pairs in 16 bits, which can saturate, so the bound leaves room; an int8 copy gone
    # wrong agrees on next to none.
    onnx_export = str(tmp_path / "onnx_export")
    proc = run_script(tmp_path, ["export", "--param_path", os.path.join(REPO, "examples", "chat_sft_ernie45.json"),
                                 *[a for o in overrides for a in ("--set", o)], "--checkpoint", best,
                                 "--format", "onnx", "--output", onnx_export], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    int8 = predicted(tmp_path, onnx_export, prompts + unseen, "onnxruntime-int8")
    same = sum(a == b for a, b in zip(int8, got))
    assert same >= 0.75 * len(got), [(a, b) for a, b in zip(int8, got) if a != b]


def first_turn(line):
    """A conversation line's system prompt and first question, as ``wenxin predict`` takes them."""
    row = json.loads(line)
    return json.dumps({"system": row["system"], "src": row["src"][:1]}, ensure_ascii=False)


def predicted(tmp_path, folder, prompts, backend="paddle"):
    """``wenxin predict``'s greedy answers (the task file's generation) to each prompt."""
    proc = run_script(tmp_path, ["predict", "--model_dir", folder, "--backend", backend,
                                 *[a for p in prompts for a in ("--text", p)]], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line.rsplit("\t", 1)[1]) for line in proc.stdout.splitlines()]


MOE_FIXTURE = os.path.join(REPO, "tests", "fixtures", "ernie45_moe", "shared")


@pytest.mark.parametrize("recipe,fixture", [("chat_sft_ernie45_0.3b_lora.yaml", FIXTURE),
                                            ("chat_sft_ernie45_21b_a3b_lora.yaml", MOE_FIXTURE)])
@pytest.mark.slow
def test_the_ernie45_lora_recipe_runs_on_the_fixture_decoder(tmp_path, recipe, fixture):
    from test_chat_sft import conversations, write_jsonl
    data = tmp_path / "data"
    write_jsonl(str(data / "train.jsonl"), conversations(12, 1))
    write_jsonl(str(data / "dev.jsonl"), conversations(4, 2))
    out = str(tmp_path / "out")
    overrides = [f"dataset_reader.{r}_reader.config.data_path={data}/{r}.jsonl" for r in ("train", "dev")]
    overrides += [f"dataset_reader.{r}_reader.fields.0.model_dir={fixture}" for r in ("train", "dev")]
    overrides += [f"dataset_reader.{r}_reader.fields.0.max_seq_len=256" for r in ("train", "dev")]
    overrides += [f"model.model_dir={fixture}", f"trainer.output_path={out}", "trainer.PADDLE_PLACE_TYPE=cpu",
                  "trainer.use_amp=false", "trainer.max_steps=3", "trainer.epoch=1",
                  "trainer.step.gradient_accumulation_steps=1"]
    proc = run_script(tmp_path, ["train", "--param_path", os.path.join(REPO, "examples", recipe),
                                 *[a for o in overrides for a in ("--set", o)]], script="wenxin/cli.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = os.listdir(os.path.join(out, "checkpoints", "best", "inference"))
    # advance and advance_pair (the int8 engine's) on one parameters file: the weights once
    assert [f for f in exported if f.endswith(".pdiparams")] == ["steps.pdiparams"]
