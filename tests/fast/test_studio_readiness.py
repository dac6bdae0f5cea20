"""What the studio's task list offers for a task file that cannot run yet (issue 67): each missing
input once, the preparation scripts that make them in the order to run them (a script that says
another runs first brings it along while its data are missing), the inputs nothing makes, and the
task file whose run writes them; and a run's folder keeps its name in any script."""
import os

from wenxin.studio import readiness
from wenxin.studio.run_commands import slug


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_missing_inputs_are_listed_once_each_with_what_follows_the_path_left_out():
    problems = ["model.model_dir: folder not found: ./models/M (also named by a.model_dir, b.model_dir); download "
                "the model there first (docs/chat.md)",
                "dataset_reader.train_reader.config.data_path: data file not found: ./examples/data/x/train.tsv",
                "dataset_reader.dev_reader.config.data_path: data file not found: ./examples/data/x/train.tsv",
                "trainer.environment.PADDLE_PLACE_TYPE: 'gpu', but the installed Paddle is a CPU build"]
    assert readiness.missing_inputs(problems) == [
        {"key": "model.model_dir", "path": "./models/M"},
        {"key": "dataset_reader.train_reader.config.data_path", "path": "./examples/data/x/train.tsv"}]
    assert readiness.other_problems(problems) == [problems[3]]


def test_scripts_come_in_the_order_to_run_them_and_what_none_makes_is_named(tmp_path):
    root = str(tmp_path)
    write(root, "examples/prepare_sentiment_data.py", '"""Writes examples/data/sentiment (the reviews)."""')
    write(root, "examples/prepare_distillation_data.py",
          '"""From the reviews (examples/prepare_sentiment_data.py first); writes ``examples/data/distillation/``."""')
    write(root, "examples/prepare_matching_data.py",
          '"""Pairs from examples/data/sentiment: run prepare_sentiment_data.py first. Writes examples/data/matching"""')
    scripts = list(readiness.preparation_scripts(root))
    both = [{"key": "a", "path": "./examples/data/distillation/student_train/"},
            {"key": "b", "path": "./examples/data/sentiment/dev.tsv"}]
    assert readiness.scripts_for(root, both, scripts) == (
        ["examples/prepare_sentiment_data.py", "examples/prepare_distillation_data.py"], [])
    matching = [{"key": "a", "path": "./examples/data/matching/train.tsv"}]
    assert readiness.scripts_for(root, matching, scripts) == (  # the one it names first comes along
        ["examples/prepare_sentiment_data.py", "examples/prepare_matching_data.py"], [])
    os.makedirs(os.path.join(root, "examples", "data", "sentiment"))
    assert readiness.scripts_for(root, matching, scripts) == (["examples/prepare_matching_data.py"], [])
    with_model = matching + [{"key": "model.model_dir", "path": "./models/ERNIE-4.5-0.3B-PT"}]
    assert readiness.scripts_for(root, with_model, scripts) == (["examples/prepare_matching_data.py"],
                                                                ["./models/ERNIE-4.5-0.3B-PT"])


def test_an_input_another_task_writes_names_that_task():
    outputs = {"examples/pretraining_ernie_mlm.json": readiness.output_folder(
        {"trainer": {"output_path": "./output/pretraining_ernie_mlm"}}), "other.json": ""}
    missing = [{"key": "k", "path": "./output/pretraining_ernie_mlm/vocab/text_a.txt"}]
    assert readiness.trained_by(missing, outputs) == "examples/pretraining_ernie_mlm.json"
    assert readiness.trained_by([{"key": "k", "path": "./output/pretraining_ernie_mlm2/x"}], outputs) is None


def test_a_run_keeps_a_chinese_name_in_its_folder():
    assert slug("词袋_手机_lr005") == "词袋_手机_lr005"  # was "_-_lr005"
    assert slug("a/b c") == "a-b-c" and slug("..") == "run" and slug("手机 评论") == "手机-评论"
