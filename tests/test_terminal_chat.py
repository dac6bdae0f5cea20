"""``wenxin chat`` (issue 68, point 2): a conversation in the terminal, answers streamed, the
history kept and fitted as the service fits it, ``/reset``, ``/system``, ``/exit``, Ctrl-C ending
an answer and not the session, Chinese in and out on a UTF-8 pseudo-terminal."""
import io
import os
import sys

import pytest

pytest.importorskip("sentencepiece")

from conftest import REPO  # noqa: E402
from test_chat_sft import FOLDER  # noqa: E402
from wenxin.inference.openai_chat import conversation_line  # noqa: E402
from wenxin.model_folders import export_of_folder  # noqa: E402

GREEDY = {"strategy": "greedy", "max_new_tokens": 12}


@pytest.fixture(scope="module")
def tied_export(tmp_path_factory):
    os.environ["WENXIN_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield export_of_folder(FOLDER)
    finally:
        os.environ.pop("WENXIN_CACHE", None)


@pytest.fixture(scope="module")
def generator(tied_export):
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    return Generator(Predictor(tied_export))


def expected_answer(generator, messages):
    """What the service answers to ``messages`` (its conversation line), greedily."""
    row = [conversation_line(messages)]
    return generator.generate([row], generator.predictor.settings_for(GREEDY))[0]["text"]


def session(generator, lines, system="", interrupt_after=None):
    """A TerminalChat fed ``lines``; returns it and what it wrote. ``interrupt_after``: Ctrl-C
    after that many pieces of the first answer."""
    from wenxin.inference.terminal_chat import TerminalChat
    feed = iter(lines)

    def read_line(prompt):
        out.write(prompt)
        line = next(feed, None)
        if line is None:
            raise EOFError
        if line == "^C":
            raise KeyboardInterrupt
        out.write(line + "\n")
        return line

    out = io.StringIO()
    chat = TerminalChat(generator, GREEDY, system, read_line, out)
    if interrupt_after is not None:
        stream = chat.generator.stream_results
        calls = {"n": 0}

        def interrupted(*args, **kwargs):
            calls["n"] += 1
            for i, piece in enumerate(stream(*args, **kwargs)):
                if calls["n"] == 1 and i == interrupt_after:
                    raise KeyboardInterrupt
                yield piece
        chat.generator = type("Interrupted", (), {"stream_results": staticmethod(interrupted),
                                                  "predictor": generator.predictor})()
    chat.run()
    return chat, out.getvalue()


def test_the_history_is_the_next_prompt_and_reset_forgets_it(generator):
    first = expected_answer(generator, [{"role": "user", "content": "你好"}])
    second = expected_answer(generator, [{"role": "user", "content": "你好"}, {"role": "assistant", "content": first},
                                         {"role": "user", "content": "再见"}])
    alone = expected_answer(generator, [{"role": "user", "content": "再见"}])
    assert second != alone  # the fixture's answers depend on the history, so the test can tell
    chat, shown = session(generator, ["你好", "再见", "/reset", "再见"])
    assert f">>> 你好\n{first}\n>>> 再见\n{second}\n>>> /reset\n" in shown
    assert shown.endswith(f">>> 再见\n{alone}\n>>> \n")
    assert chat.messages == [{"role": "user", "content": "再见"}, {"role": "assistant", "content": alone}]


def test_a_system_prompt_leads_the_conversation(generator):
    system = "你是一个生活小助理"
    expected = expected_answer(generator, [{"role": "system", "content": system}, {"role": "user", "content": "你好"}])
    _, shown = session(generator, ["你好"], system=system)
    assert f">>> 你好\n{expected}\n" in shown
    _, shown = session(generator, [f"/system {system}", "你好", "/exit", "never read"])
    assert f"(system prompt set; a new conversation)\n>>> 你好\n{expected}\n>>> /exit\n" in shown
    assert "never read" not in shown


def test_ctrl_c_ends_the_answer_not_the_session(generator):
    full = expected_answer(generator, [{"role": "user", "content": "你好"}])
    chat, shown = session(generator, ["你好", "^C", "再见"], interrupt_after=2)
    assert " [stopped]\n" in shown and "(Ctrl-D or /exit ends the session)" in shown
    kept = chat.messages[1]["content"]
    assert full.startswith(kept) and len(kept) < len(full)  # what was written stays in the conversation
    assert chat.messages[2] == {"role": "user", "content": "再见"}
    expected = expected_answer(generator, [{"role": "user", "content": "你好"},
                                           {"role": "assistant", "content": kept},
                                           {"role": "user", "content": "再见"}])
    assert chat.messages[3]["content"] == expected


def test_a_question_longer_than_the_prompt_limit_is_an_error_and_the_session_goes_on(generator):
    limit = generator.predictor.fields[0].max_seq_len
    chat, shown = session(generator, ["长" * (limit + 10), "你好"])
    assert "error: " in shown and "max_seq_len" in shown
    assert [m["content"] for m in chat.messages][0] == "你好"


def test_bad_sampling_flags_are_one_error_before_the_session(tmp_path):
    from wenxin.cli import main
    os.environ["WENXIN_CACHE"] = str(tmp_path / "cache")
    try:
        assert main(["chat", FOLDER, "--top_p", "1.5"]) == 2
    finally:
        os.environ.pop("WENXIN_CACHE", None)


@pytest.mark.parametrize("backend", ["auto", "onnxruntime"])
def test_wenxin_chat_in_a_pseudo_terminal_speaks_chinese(tmp_path, generator, backend):
    """Also on ONNX Runtime (``--backend onnxruntime``: the folder's cached export converted once),
    whose float32 answers are Paddle's."""
    pexpect = pytest.importorskip("pexpect")
    if backend != "auto":
        pytest.importorskip("paddle2onnx")
        pytest.importorskip("onnxruntime")
    first = expected_answer(generator, [{"role": "user", "content": "今天天气很好吗？"}])
    env = {**os.environ, "GLOG_minloglevel": "2", "WENXIN_CACHE": str(tmp_path / "cache"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    child = pexpect.spawn(sys.executable, ["-m", "wenxin", "chat", FOLDER, "--temperature", "0", "--max_new_tokens",
                                           "12", "--backend", backend], env=env, encoding="utf-8", timeout=300,
                          cwd=str(tmp_path))
    try:
        child.expect_exact("/help for the commands")
        child.expect_exact(">>> ")
        child.sendline("今天天气很好吗？")
        child.expect_exact(">>> ")
        said = child.before.replace("\r\n", "\n")
        assert said.startswith("今天天气很好吗？\n") and said.endswith(f"{first}\n"), said
        child.sendintr()  # Ctrl-C: the session stays
        child.expect_exact("(Ctrl-D or /exit ends the session)")
        child.expect_exact(">>> ")
        child.sendline("/reset")
        child.expect_exact("(the conversation is forgotten)")
        child.expect_exact(">>> ")
        child.sendline("今天天气很好吗？")
        child.expect_exact(">>> ")
        assert child.before.replace("\r\n", "\n").endswith(f"{first}\n")  # as the first time: history forgotten
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
