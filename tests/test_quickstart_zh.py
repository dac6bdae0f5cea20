"""docs/quickstart.zh.md's walk-through of a task of one's own (section 6), as the page writes it:
its three files are written out, and its two commands train the task and predict with it."""
import os
import re
import subprocess
import sys

from conftest import REPO, write_tsv
from test_extending_docs import FILE_BLOCK, reviews_of

PAGE = os.path.join(REPO, "docs", "quickstart.zh.md")
GOOD, BAD = ["很好", "满意", "喜欢", "推荐", "不错", "好看"], ["太差", "失望", "难用", "退货", "糟糕", "不推荐"]
NEUTRAL = ["质量", "这本书", "包装", "快递", "价格", "东西", "买了", "觉得", "真的", "，"]


def reviews(n, seed):
    return reviews_of(n, seed, GOOD, BAD, NEUTRAL, (2, 5), lambda words, rng: "".join(words))


def test_the_chinese_walk_through_of_a_new_task_runs_as_written(tmp_path):
    page = open(PAGE, encoding="utf-8").read()
    section = page[page.index("## 6."):page.index("## 继续阅读")]
    files = FILE_BLOCK.findall(section)
    assert sorted(name for name, _ in files) == ["tasks/zh_task/__init__.py", "tasks/zh_task/models.py", "zh_task.json"]
    for name, text in files:
        os.makedirs(os.path.dirname(os.path.join(tmp_path, name)) or str(tmp_path), exist_ok=True)
        with open(os.path.join(tmp_path, name), "w", encoding="utf-8") as f:
            f.write(text)
    write_tsv(str(tmp_path / "data" / "train.tsv"), reviews(320, 1))
    write_tsv(str(tmp_path / "data" / "dev.tsv"), reviews(80, 2))
    commands = re.search(r"```bash\n(wenxin train.*?)```", section, re.S).group(1).strip().splitlines()
    assert len(commands) == 2
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": REPO}
    outputs = []
    for line in commands:
        args = [a.strip('"') for a in re.findall(r'"[^"]*"|\S+', line.split("  #")[0])][1:]  # after "wenxin"
        proc = subprocess.run([sys.executable, "-m", "wenxin.cli", *args], cwd=str(tmp_path), capture_output=True,
                              text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs.append(proc.stdout)
    lines = [line.split("\t") for line in outputs[1].strip().splitlines()]
    assert [(text, name) for text, name, _ in lines] == [("质量很好，很满意", "好评"), ("太差了，不推荐", "差评")]
    assert all(0.5 < float(probability) <= 1 for _, _, probability in lines)
