"""The studio's two languages: the same messages in each, every message the page script asks for
present, a label and help line in both for every key of the default form, and the language chosen
from the switch's cookie, else Accept-Language."""
import os
import re

from wenxin.studio import i18n
from wenxin.studio.forms import DEFAULT_KEYS

STATIC = os.path.dirname(i18n.MESSAGES_PATH)


def test_both_languages_have_the_same_messages_and_no_empty_one():
    said = i18n.messages()
    assert set(said) == set(i18n.LANGUAGES)
    assert set(said["en"]) == set(said["zh"])
    assert all(text.strip() for language in said.values() for text in language.values())
    for key in said["en"]:  # the same places to fill in each language
        assert set(re.findall(r"\{(\w+)\}", said["en"][key])) == set(re.findall(r"\{(\w+)\}", said["zh"][key])), key


def test_chinese_messages_are_chinese():
    said = i18n.messages()["zh"]
    words = [key for key, text in said.items() if not key.startswith("lang.") and re.search(r"[\u4e00-\u9fff]", text)]
    untranslated = [key for key, text in said.items() if text == i18n.messages()["en"][key]
                    and not key.startswith("lang.") and re.search(r"[a-z]{3}", text)]
    assert len(words) > 100 and untranslated == [], untranslated


def test_every_message_the_script_asks_for_exists():
    script = ""
    for name in sorted(os.listdir(STATIC)):
        if name.endswith(".js") and not name.startswith("uPlot"):
            with open(os.path.join(STATIC, name), encoding="utf-8") as f:
                script += f.read()
    asked = set(re.findall(r'\bt\("([a-z_]+\.[a-z_.]+)"', script))
    assert len(asked) > 40
    assert sorted(asked - set(i18n.messages()["en"])) == []
    # keys built from a prefix: every value they take
    for prefix, values in (("status.", ("queued", "running", "restarting", "finished", "failed", "stopped",
                                        "interrupted")),
                           ("col.", ("run", "name", "status", "progress", "restarts", "settings", "best", "started",
                                     "final", "final_dev", "test", "wall", "speed")),
                           ("outcome.", ("dev", "test")),
                           ("event.", ("queued", "started", "restarted", "finished", "failed", "stopped", "stopping",
                                       "interrupted", "reattached")),
                           ("chart.", ("loss", "lr", "dev"))):
        assert all(prefix + value in i18n.messages()["en"] for value in values), prefix


def test_every_key_of_the_default_form_has_a_label_and_help_in_both_languages():
    for language in i18n.LANGUAGES:
        said = i18n.messages()[language]
        assert [key for key in DEFAULT_KEYS if f"key.{key}" not in said or f"help.{key}" not in said] == []
    assert i18n.text("zh", "key.model.optimization.learning_rate") == "学习率"
    assert "trainer.logging.train_log_step" in DEFAULT_KEYS  # the logging interval is offered


def test_the_language_comes_from_the_cookie_else_accept_language():
    choose = i18n.choose_language
    assert choose("", "zh-CN,zh;q=0.9,en;q=0.8") == "zh"
    assert choose("", "zh-TW") == "zh"
    assert choose("", "en-US,en;q=0.9,zh-CN;q=0.8") == "en"
    assert choose("", "fr-FR, zh;q=0.5, en;q=0.4") == "zh"  # the first of ours by q
    assert choose("", "en;q=0.2, zh;q=0.9") == "zh"
    assert choose("", "") == "en" and choose("", "fr, de") == "en" and choose("", "zh;q=0, en") == "en"
    assert choose("", "zh;q=abc") == "en" and choose("", ";;,,") == "en"
    assert choose("en", "zh-CN") == "en" and choose("zh", "en") == "zh"
    assert choose("xx", "zh") == "zh"  # a cookie naming no language of ours is not a choice


def test_every_notice_the_server_writes_exists_in_both_languages():
    """Events, causes and refusals are kept as notices (a key and values) and said in the page's
    language: every key the studio's code names exists, with the same places in each language."""
    studio = os.path.dirname(os.path.dirname(i18n.MESSAGES_PATH))
    named = set()
    for name in os.listdir(studio):
        if name.endswith(".py"):
            with open(os.path.join(studio, name), encoding="utf-8") as f:
                named |= set(re.findall(r'notice\("(notice\.[a-z_]+)"', f.read()))
    assert len(named) > 30
    assert sorted(named - set(i18n.messages()["en"])) == []


def test_a_notice_is_said_in_each_language_its_nested_notices_too():
    cause = i18n.notice("notice.exit_signal", signal="SIGKILL")
    said = i18n.notice("notice.restart_in", n=1, budget=3, delay="10", cause=cause,
                       continuation=i18n.notice("notice.continues_from", step=120))
    assert said.english() == "restart 1 of 3 in 10 s after killed by SIGKILL; it continues from its checkpoint at step 120"
    assert said.render("zh") == "10 秒后第 1 次重启（共 3 次），原因：被 SIGKILL 信号终止；将从第 120 步的检查点继续"
    assert i18n.Notice.from_json(said.as_json()) == said
    refused = i18n.NoticedError(i18n.notice("notice.already", id=4, status=i18n.notice("status.running")))
    assert str(refused) == "run 4 is running already" and refused.notice.render("zh") == "第 4 号运行已是运行中状态"
