"""wenxin studio in a real browser (headless Chromium through Selenium): launch a run from the
form, watch it finish with its charts, checkpoints and events, try its exported model, clone it
with a changed value, compare the two, and delete one; watch a longer run's chart grow, stop it,
resume it, kill its training with SIGKILL, and see the supervisor restart it and end it with the
final metrics of an uninterrupted run; open its VisualDL view. Each page is kept as a screenshot
(in ``$WENXIN_STUDIO_SCREENSHOTS``, else the test's temporary folder; the docs show them).
Skipped where no Chromium and chromedriver are installed (Debian: apt-get install chromium
chromium-driver)."""
import json
import os
import re
import shutil
import signal
import time

import pytest

from studio_helpers import WAIT_SECONDS, make_root, serving, store_run

webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests drive Chromium with selenium")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = [pytest.mark.skipif(not (CHROMEDRIVER and CHROMIUM), reason="no Chromium and chromedriver here"),
              pytest.mark.slow]


def chromium(languages):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", "--disable-extensions", "--no-first-run",
                     f"--lang={languages.split(',')[0]}"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"intl.accept_languages": languages})  # its Accept-Language
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no driver download
    driver.set_page_load_timeout(120)
    return driver


@pytest.fixture
def browser():
    driver = chromium("en-US,en")
    yield driver
    driver.quit()


@pytest.fixture
def chinese_browser():
    driver = chromium("zh-CN,zh")
    yield driver
    driver.quit()


def no_sideways_scrolling(browser, what):
    width, scrolled = browser.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
    assert scrolled <= width, f"{what} scrolls sideways at {width} px: {scrolled} px wide"


@pytest.fixture
def screenshot(tmp_path):
    """``screenshot(browser, name)`` keeps the page as ``studio-<name>.png``."""
    folder = os.environ.get("WENXIN_STUDIO_SCREENSHOTS") or str(tmp_path / "screenshots")
    os.makedirs(folder, exist_ok=True)

    def take(browser, name):
        path = os.path.join(folder, f"studio-{name}.png")
        assert browser.save_screenshot(path), path
        return path
    return take


def wait_until(condition, what, browser=None):
    deadline = time.time() + WAIT_SECONDS
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    shown = ""
    if browser is not None:  # the page's message, and any error shown beside a box
        causes = [element.text for element in find(browser, ".cause") if element.text]
        shown = f"; the page says: {text_of(browser, '#message')!r}" + (f", beside a box: {causes}" if causes else "")
    raise AssertionError(f"never: {what}{shown}")


def find(driver, selector):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def text_of(driver, selector):
    """The element's text, or "" when there is none, or when the page's poll replaced it while it
    was read (the caller's wait asks again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    try:
        found = find(driver, selector)
        return found[0].text if found else ""
    except StaleElementReferenceException:
        return ""


def test_launch_watch_try_clone_compare_and_delete_in_a_browser(tmp_path, monkeypatch, browser, screenshot):
    root = str(tmp_path / "root")
    os.makedirs(root)
    make_root(root, epoch=4, save_inference=True)
    with serving(root, monkeypatch) as server:
        base = f"http://localhost:{server.port}"
        browser.get(base + "/")
        wait_until(lambda: text_of(browser, "h1") == "Runs", "the runs page")
        find(browser, "a.button")[0].click()  # "launch a run"
        wait_until(lambda: find(browser, '#tasks li[data-ready="yes"]'), "the task list, ready to run")
        find(browser, "#tasks a")[0].click()
        rate = wait_until(lambda: find(browser, 'input[name="model.optimization.learning_rate"]'), "the form")[0]
        assert rate.get_attribute("value") == "0.01"  # the task file's value
        assert "wenxin train --param_path task.json" in text_of(browser, "#command")
        rate.clear()
        rate.send_keys("-1")  # the error shows beside its field, and start waits for a value that loads
        error = '[data-error-for="model.optimization.learning_rate"]'
        wait_until(lambda: "model.optimization.learning_rate" in text_of(browser, error), "the error by its field")
        assert not find(browser, "#start")[0].is_enabled()
        rate.clear()
        rate.send_keys("0.02")
        wait_until(lambda: "--set model.optimization.learning_rate=0.02" in text_of(browser, "#command"),
                   "the command with the edited value")
        assert text_of(browser, error) == "" and find(browser, "#start")[0].is_enabled()
        find(browser, "#preview-data")[0].click()
        wait_until(lambda: find(browser, '#preview .reader-preview[data-reader="train_reader"] .bar'),
                   "the data preview's label bars", browser)
        assert "train_reader: 240 examples" in text_of(browser, "#preview")
        browser.execute_script("document.getElementById('command').scrollIntoView()")
        screenshot(browser, "launch")
        name = find(browser, "#run-name")[0]
        name.clear()
        name.send_keys("first")
        find(browser, "#start")[0].click()
        wait_until(lambda: "/runs/" in browser.current_url, "the run's page")
        wait_until(lambda: "finished" in text_of(browser, "#run-head .status"), "the run finishing")
        assert "--set model.optimization.learning_rate=0.02" in text_of(browser, "#run-head .command")
        charts = wait_until(lambda: len(find(browser, ".chart canvas")) >= 3 and find(browser, ".chart"), "charts")
        titles = {chart.get_attribute("data-chart") for chart in charts}
        assert {"loss", "lr", "dev"} <= titles  # the dev metrics share one chart
        assert len(find(browser, "#checkpoints tr")) > 1
        assert "finished" in text_of(browser, "#events")
        assert "done" in text_of(browser, "#log")
        assert "null" not in text_of(browser, "#run-head") + text_of(browser, "#run-side")  # nothing unset shown

        # try the exported model
        box = wait_until(lambda: find(browser, "#try-text"), "the try box")[0]
        box.send_keys("好棒赞的书")
        find(browser, "#try-run")[0].click()
        wait_until(lambda: find(browser, "#try-output .prediction .bar"), "a prediction with probability bars",
                   browser)
        assert text_of(browser, "#try-answered-by").startswith("answered by best (")  # the best checkpoint's
        # the checkpoints offered are the run's exports now, not those of the moment the box first showed (the run
        # deletes all but its newest checkpoints as it goes)
        run_id = browser.current_url.rstrip("/").rsplit("/", 1)[-1]
        exports = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"call('GET', '/api/runs/{run_id}').then(run => done(run.exports.map(e => e.name)));")
        offered = [option.get_attribute("value") for option in find(browser, "#try-checkpoint option")]
        assert offered == exports and exports[0] == "best"
        browser.execute_script("document.getElementById('try').scrollIntoView()")
        screenshot(browser, "run")

        # clone with a changed value
        find(browser, "#clone")[0].click()
        rate = wait_until(lambda: find(browser, 'input[name="model.optimization.learning_rate"]'), "the clone form")[0]
        assert rate.get_attribute("value") == "0.02"  # the cloned run's value
        rate.clear()
        rate.send_keys("0.05")
        find(browser, "#start")[0].click()
        wait_until(lambda: browser.current_url.endswith("/runs/2"), "the clone's page")
        wait_until(lambda: "finished" in text_of(browser, "#run-head .status"), "the clone finishing")
        assert "first (clone)" in text_of(browser, "#run-head h1")

        # compare: the curves of both and their settings, differences highlighted
        browser.get(base + "/compare?ids=1,2")
        wait_until(lambda: find(browser, "#compare-chart canvas"), "the comparison chart")
        differing = wait_until(lambda: [row.text for row in find(browser, "#compare-settings tr.differs")],
                               "highlighted settings", browser)
        assert any(row.startswith("model.optimization.learning_rate") and "0.02" in row and "0.05" in row
                   for row in differing), differing
        assert not any(row.startswith("model.optimization.optimizer") for row in differing)
        rows = find(browser, "#compare-settings tr")[1:]
        assert len(rows) == len(differing)  # only the differences, until every key is asked for
        find(browser, "#compare-all-keys")[0].click()
        wait_until(lambda: len(find(browser, "#compare-settings tr")) > len(rows) + 10, "every key listed")
        summary = text_of(browser, "#compare-summary")
        assert summary.count("acc") >= 4 and "steps/s" in summary, summary  # best, final dev and test of each
        screenshot(browser, "compare")

        # the runs page lists both; delete the clone (confirmed by typing its name)
        browser.get(base + "/")
        wait_until(lambda: len(find(browser, "#runs tr[data-run]")) == 2, "two runs listed")
        assert {row.get_attribute("data-status") for row in find(browser, "#runs tr[data-run]")} == {"finished"}
        screenshot(browser, "runs")
        assert re.search(r"step (\d+) of \1 · 100%", text_of(browser, "#runs .progress")), text_of(browser, "#runs")

        # at a phone's width no page scrolls sideways; the runs list becomes cards
        browser.set_window_size(390, 844)
        for name, path, ready in (("runs", "/", "#runs tr[data-run] .progress"),
                                  ("run", "/runs/1", ".chart canvas"),
                                  ("launch", "/launch?task=task.json", "#start"),
                                  ("compare", "/compare?ids=1,2", "#compare-chart canvas")):
            browser.get(base + path)
            wait_until(lambda ready=ready: find(browser, ready), f"the {name} page at 390 px")
            screenshot(browser, f"phone-{name}")
            no_sideways_scrolling(browser, path)
        browser.set_window_size(1280, 900)
        browser.get(base + "/runs/2")
        wait_until(lambda: find(browser, "#delete"), "the delete button")[0].click()
        alert = wait_until(lambda: _alert(browser), "the confirmation prompt")
        alert.send_keys("first (clone)")
        alert.accept()
        wait_until(lambda: browser.current_url.rstrip("/") == base, "back on the runs page")
        wait_until(lambda: len(find(browser, "#runs tr[data-run]")) == 1, "one run left")
        assert not os.path.exists(os.path.join(root, "studio_runs", "0002-first-clone"))


def points(browser):
    """How many points the run page's loss chart holds."""
    charts = [c for c in find(browser, ".chart") if c.get_attribute("data-chart") == "loss"]
    return int(charts[0].get_attribute("data-points") or 0) if charts else 0


def train_records(root, run_id):
    """How many training records a run has written to its metrics file so far."""
    path = os.path.join(root, store_run(root, run_id)["folder"], "output", "logs", "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return sum('"tag": "train"' in line for line in f)


def final_metrics(root, run_id):
    """The dev and test records a run wrote, by tag and step (the time of each left out)."""
    folder = store_run(root, run_id)["folder"]
    with open(os.path.join(root, folder, "output", "logs", "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return {(r["tag"], r["step"]): {k: v for k, v in r.items() if k not in ("time", "elapsed_sec")}
            for r in records if r["tag"] in ("dev", "test")}


def test_stop_resume_and_a_sigkill_end_as_an_uninterrupted_run_in_a_browser(tmp_path, monkeypatch, browser,
                                                                            screenshot):
    root = str(tmp_path / "root")
    os.makedirs(root)
    # 30,000 steps (about 30 s here); the stop is made certain by holding the process still
    make_root(root, epoch=2000, save_model_step=2000, eval_step=10000, train_log_step=50, visualdl=True)
    # as from a second device: listening on every address, so the token is needed
    with serving(root, monkeypatch, restart_budget=2, host="0.0.0.0", token="browser-t0ken-for-tests") as server:
        base = f"http://localhost:{server.port}"
        browser.get(base + "/launch?task=task.json")
        assert "needs its token" in text_of(browser, "body")
        browser.get(base + "/launch?task=task.json&token=browser-t0ken-for-tests")  # a cookie from then on
        name = wait_until(lambda: find(browser, "#run-name"), "the form")[0]
        name.clear()
        name.send_keys("kept alive")
        find(browser, "#start")[0].click()
        wait_until(lambda: browser.current_url.endswith("/runs/1"), "the run's page")

        # the chart grows while the run trains
        first = wait_until(lambda: points(browser), "a first point on the loss chart")
        wait_until(lambda: points(browser) > first, "the loss chart growing")
        screenshot(browser, "running")

        # stop (a checkpoint, exit 75), then resume from it; the training is held still meanwhile,
        # so that it cannot finish before the stop arrives however fast the machine is
        pid = store_run(root, 1)["train_pid"]
        os.kill(pid, signal.SIGSTOP)
        find(browser, "#stop")[0].click()
        wait_until(lambda: store_run(root, 1)["stop_requested"], "the stop asked")
        os.kill(pid, signal.SIGCONT)
        wait_until(lambda: "stopped" in text_of(browser, "#run-head .status"), "the run stopping", browser)
        assert "stopped from the studio" in text_of(browser, "#events")
        wait_until(lambda: find(browser, "#resume"), "the resume button")[0].click()
        # the resumed process is held still (from the store, at once) while the page catches up:
        # on an idle machine it otherwise ran to its end before the page showed it had started
        pid = wait_until(lambda: store_run(root, 1)["train_pid"], "the resumed run's process")
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: text_of(browser, "#events").count("started") >= 2, "the run starting again", browser)

        # SIGKILL the training process, as the kernel's out-of-memory killer would, once it has
        # trained past its checkpoint (seen in its metrics file)
        logged = train_records(root, 1)
        os.kill(pid, signal.SIGCONT)
        wait_until(lambda: train_records(root, 1) > logged, "the resumed run training")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: "killed by SIGKILL" in text_of(browser, "#events"), "the restart and its cause", browser)
        wait_until(lambda: "finished" in text_of(browser, "#run-head .status"), "the run finishing", browser)
        assert "restarts 1 of 2" in text_of(browser, "#run-head")
        browser.execute_script("document.getElementById('run-side').scrollIntoView()")
        screenshot(browser, "restarted")

        # its tracker view, through the studio
        link = wait_until(lambda: [a for a in find(browser, "#run-side li.tracker a")
                                   if a.get_attribute("href").endswith("/view/1/visualdl/")], "the VisualDL link")[0]
        browser.get(link.get_attribute("href"))
        wait_until(lambda: "VisualDL" in browser.title  # its groups of charts: the run's train, dev, test records
                   and {"train", "dev", "test"} <= set(text_of(browser, "body").splitlines()), "VisualDL's charts")
        screenshot(browser, "visualdl")

        # the same run without interruption ends with the same metrics, exactly
        browser.get(base + "/runs/1")
        wait_until(lambda: find(browser, "#clone"), "the clone button")[0].click()
        wait_until(lambda: find(browser, "#start"), "the clone form")[0].click()
        wait_until(lambda: browser.current_url.endswith("/runs/2"), "the second run's page")
        wait_until(lambda: "finished" in text_of(browser, "#run-head .status"), "the second run finishing", browser)
        assert "restarts 0 of 2" in text_of(browser, "#run-head")
        kept, uninterrupted = final_metrics(root, 1), final_metrics(root, 2)
        assert ("test", 30000) in kept and kept == uninterrupted


def _alert(browser):
    from selenium.common.exceptions import NoAlertPresentException
    try:
        return browser.switch_to.alert
    except NoAlertPresentException:
        return None


def test_the_journey_in_chinese_at_both_widths_and_a_switch_to_english_that_sticks(tmp_path, monkeypatch,
                                                                                   chinese_browser, screenshot):
    browser = chinese_browser
    root = str(tmp_path / "root")
    make_root(root, epoch=2)
    with serving(root, monkeypatch) as server:
        base = f"http://localhost:{server.port}"
        browser.get(base + "/")  # the browser asks for Chinese
        assert browser.find_element("css selector", "html").get_attribute("lang") == "zh-CN"
        wait_until(lambda: "运行记录" in text_of(browser, "h1"), "the runs page in Chinese")
        assert text_of(browser, "header nav") == "运行 启动 对比"
        browser.get(base + "/launch?task=task.json")
        label = wait_until(lambda: find(browser, 'tr[data-key="model.optimization.learning_rate"] th'), "the form")[0]
        assert label.text.splitlines() == ["学习率", "model.optimization.learning_rate"]  # the key path beneath
        help_line = text_of(browser, 'tr[data-key="trainer.logging.train_log_step"] .help')
        assert "日志" not in help_line and "损失" in help_line, help_line
        screenshot(browser, "zh-launch")
        browser.set_window_size(390, 844)
        screenshot(browser, "zh-phone-launch")
        no_sideways_scrolling(browser, "the launch form in Chinese")
        browser.set_window_size(1280, 900)
        find(browser, "#start")[0].click()
        wait_until(lambda: "/runs/" in browser.current_url, "the run's page")
        wait_until(lambda: find(browser, '#run-head .status[data-status="finished"]'), "the run finishing")
        assert text_of(browser, "#run-head .status") == "已完成"
        wait_until(lambda: re.search(r"第 (\d+) / \1 步 · 100%", text_of(browser, "#run-head .progress")),
                   "its progress in Chinese", browser)
        assert "检查点" in text_of(browser, "#run-side") and "日志" in text_of(browser, "main")
        # what the server wrote of the run is said in Chinese too, each kind once
        events = text_of(browser, "#events").splitlines()
        assert [line.split(" · ", 1)[1] for line in events[:1] + events[-1:]] == ["已排队", "已完成"], events
        assert re.fullmatch(r".* · 已开始：进程 \d+", events[1]) and not re.search(r"[a-z]{3}", " ".join(events)), events
        screenshot(browser, "zh-run")
        browser.set_window_size(390, 844)
        screenshot(browser, "zh-phone-run")
        no_sideways_scrolling(browser, "the run page in Chinese")
        for name, path, ready in (("runs", "/", "#runs tr[data-run] .progress"),
                                  ("tasks", "/launch", '#tasks li[data-ready="yes"]'),
                                  ("compare", "/compare?ids=1", "#compare-summary .progress")):
            for width, height, prefix in ((390, 844, "zh-phone-"), (1280, 900, "zh-")):
                browser.set_window_size(width, height)
                browser.get(base + path)
                wait_until(lambda ready=ready: find(browser, ready), f"the {name} page in Chinese", browser)
                screenshot(browser, prefix + name)
                no_sideways_scrolling(browser, f"the {name} page in Chinese")
        assert "对比运行" in text_of(browser, "h1") and "最终验证" in text_of(browser, "#compare-summary")

        # the switch: English from then on, whatever the browser asks for
        browser.get(base + "/")
        wait_until(lambda: find(browser, "#runs tr[data-run]"), "the runs page")
        find(browser, "#language")[0].click()
        wait_until(lambda: text_of(browser, "h1") == "Runs", "the runs page in English")
        browser.get(base + "/launch?task=task.json")
        wait_until(lambda: find(browser, 'tr[data-key="model.optimization.learning_rate"] th'), "the form")
        assert browser.find_element("css selector", "html").get_attribute("lang") == "en"
        assert text_of(browser, 'tr[data-key="model.optimization.learning_rate"] th').splitlines()[0] == "learning rate"
        find(browser, "#language")[0].click()  # and back
        wait_until(lambda: text_of(browser, "h1").startswith("启动"), "the launch page in Chinese again")


def test_chat_with_a_chat_run_in_a_browser_streamed_with_sampling_settings(tmp_path, monkeypatch, chinese_browser,
                                                                           screenshot):
    pytest.importorskip("sentencepiece")
    from test_chat_generate import QA, memorizing_config, studio_run_with_export

    from conftest import build
    trainer = build(memorizing_config(tmp_path, "dynamic", True), tmp_path)
    trainer.do_train()
    export = trainer.export_inference(str(tmp_path / "export"))
    browser = chinese_browser
    root = str(tmp_path / "root")
    os.makedirs(root)
    run_id = studio_run_with_export(root, export)
    with serving(root, monkeypatch) as server:
        browser.get(f"http://localhost:{server.port}/runs/{run_id}")
        box = wait_until(lambda: find(browser, "#chat-input"), "the chat box")[0]
        assert "与模型对话" in text_of(browser, "#try")
        for turn, (question, _) in enumerate((QA[2], QA[0]), start=1):  # two turns
            box.send_keys(question)
            find(browser, "#chat-send")[0].click()
            wait_until(lambda turn=turn: len(find(browser, '.turn.assistant[data-done="1"]')) == turn,
                       "the answer's end", browser)
        said = [t.text for t in find(browser, ".turn.assistant .said")]
        assert said[0] == QA[2][1], said  # the memorized answer, streamed into its bubble
        assert len(find(browser, ".turn.user")) == 2 and len(said) == 2
        assert not find(browser, ".chart")  # a run without records draws no empty chart
        # issue 67: the answer's length is bounded by the model's own limit, said in Chinese
        with open(os.path.join(export, "preprocess.json"), encoding="utf-8") as f:
            limit = min(2048, json.load(f)["generation"]["max_new_tokens_limit"])
        tokens = find(browser, "#chat-max-tokens")[0]
        assert tokens.get_attribute("max") == str(limit) and limit < 2048
        tokens.clear()
        tokens.send_keys(str(limit + 1))
        box.send_keys(QA[1][0])
        find(browser, "#chat-send")[0].click()
        wait_until(lambda: f"回答长度：1 到 {limit} 之间的整数" in text_of(browser, "#message"), "the bound, in Chinese")
        assert len(find(browser, ".turn.user")) == 2  # nothing was sent
        tokens.clear()
        tokens.send_keys("20")
        # stopped at once (the same moment it is sent): marked as stopped, not as a whole answer
        browser.execute_script("document.getElementById('chat-send').click(); "
                               "document.getElementById('chat-stop-answer').click();")
        wait_until(lambda: find(browser, '.turn.assistant[data-done="stopped"] .stopped-mark'), "the stopped mark")
        assert text_of(browser, '.turn.assistant[data-done="stopped"] .stopped-mark') == "（已停止）"
        browser.execute_script("document.getElementById('try').scrollIntoView()")
        screenshot(browser, "zh-chat")
        browser.set_window_size(390, 844)
        browser.execute_script("document.getElementById('chat-log').scrollIntoView()")
        screenshot(browser, "zh-phone-chat")
        no_sideways_scrolling(browser, "the chat page")


def tap(browser, element):
    """A real tap of a finger on ``element`` (touch events at its centre), as a phone sends it."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    x, y = browser.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                  "return [r.x + r.width / 2, r.y + r.height / 2]", element)
    browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    browser.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x, "y": y}]})
    browser.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


def small_tap_targets(browser):
    """Links, buttons, check boxes (with their labels), menus and fields under 44 px high, as text."""
    return browser.execute_script("""
        const small = [];
        for (const e of document.querySelectorAll('a, button, select, input, label')) {
          if (!e.offsetParent || e.closest('.uplot') || e.type === 'range' || e.tagName === 'TEXTAREA') continue;
          const target = e.type === 'checkbox' && e.closest('label') ? e.closest('label') : e;
          if (e.tagName === 'LABEL') continue;  // a box is measured by its label, other fields by themselves
          if (e.tagName === 'A' && e.closest('pre, .help, #events, .tracker')) continue;  // links inside text
          const r = target.getBoundingClientRect();
          const said = (e.textContent || e.value || '').slice(0, 20);
          if (r.height < 43.5) small.push(`${e.tagName.toLowerCase()}#${e.id || ''}.${e.className || ''} `
                                          + `${Math.round(r.width)}x${Math.round(r.height)} ${said}`);
        }
        return small;""")


def test_the_studio_on_a_phone_in_chinese_and_a_desktop_in_english_issue_67(tmp_path, monkeypatch, browser,
                                                                             chinese_browser, screenshot):
    """Issue 67's studio defects, in real Chromium at 390 px in Chinese and 1366 px in English: the
    task list does not call a recipe without its model folder ready, lists each missing input once,
    offers two preparation scripts in order and another task's run where that makes the input; the
    launch form fits the phone, names the graph mode in words, and starts on a real tap; a run keeps
    its Chinese name in its folder; the learning-rate axis reads whole; charts follow a turn of the
    phone; a finished run's page stops asking every two seconds; a preparation job's page is a
    job's; compare speaks Chinese and leaves data jobs out; every tap target is at least 44 px; the
    sign-in page speaks the browser's language."""
    root = str(tmp_path / "root")
    os.makedirs(root)
    make_root(root, epoch=2, save_inference=True)
    long_name = "a_task_file_whose_name_is_longer_than_a_phone_is_wide.json"
    shutil.copy(os.path.join(root, "task.json"), os.path.join(root, long_name))
    from wenxin.runner import copy_examples
    copy_examples(root)
    with serving(root, monkeypatch) as server:
        base = f"http://localhost:{server.port}"
        phone = chinese_browser
        phone.set_window_size(390, 844)
        phone.get(base + "/launch")
        wait_until(lambda: find(phone, '#tasks li[data-ready] .task-state .cause') and
                   len(find(phone, "#tasks li[data-ready]")) >= 10, "the task list's states", phone)
        state = {li.get_attribute("data-task"): li for li in find(phone, "#tasks li")}
        recipe = state["examples/chat_sft_ernie45_0.3b_lora.yaml"]
        assert recipe.get_attribute("data-ready") == "no"
        missing = [line for line in recipe.text.splitlines() if line.startswith("缺少")]
        assert missing.count("缺少：./models/ERNIE-4.5-0.3B-PT") == 1, recipe.text  # once, not once a key
        assert "prepare_chat_data.py" in recipe.text and "没有能生成 ./models/ERNIE-4.5-0.3B-PT" in recipe.text
        from wenxin.common.paddle_support import installed_builds
        if [name for name, _ in installed_builds()] == ["paddlepaddle"]:  # a GPU asked of a CPU build: said too
            assert "PADDLE_PLACE_TYPE: 'gpu', but the installed Paddle" in recipe.text, recipe.text
        distillation = state["examples/distillation_student_bow.json"].text
        assert "准备数据：python examples/prepare_sentiment_data.py" in distillation
        assert "之后再运行：examples/prepare_distillation_data.py" in distillation, distillation
        ernie = state["examples/text_classification_ernie.json"]
        assert "examples/pretraining_ernie_mlm.json" in ernie.text and find(ernie, ".after a"), ernie.text
        screenshot(phone, "67-zh-phone-tasks")
        no_sideways_scrolling(phone, "the task list")
        assert small_tap_targets(phone) == []

        # the launch form: it fits, the graph mode in words, a real tap starts the run
        phone.get(base + f"/launch?task={long_name}")
        wait_until(lambda: find(phone, 'select[name="model.is_dygraph"]'), "the form", phone)
        no_sideways_scrolling(phone, "the launch form of a long file name")
        options = [o.text for o in find(phone, 'select[name="model.is_dygraph"] option')]
        assert sorted(options) == sorted(["动态图（边算边执行）", "静态图（先建图再执行）"]), options
        assert small_tap_targets(phone) == []
        screenshot(phone, "67-zh-phone-launch")
        phone.get(base + "/launch?task=task.json")
        name = wait_until(lambda: find(phone, "#run-name"), "the form", phone)[0]
        name.clear()
        name.send_keys("词袋_手机_lr005")
        tap(phone, find(phone, "#start")[0])
        wait_until(lambda: "/runs/" in phone.current_url, "the run's page after a tap", phone)
        run_id = int(phone.current_url.rsplit("/", 1)[1])
        wait_until(lambda: find(phone, '#run-head .status[data-status="finished"]'), "the run finishing", phone)
        assert os.path.isdir(os.path.join(root, "studio_runs", f"{run_id:04d}-词袋_手机_lr005"))
        wait_until(lambda: phone.execute_script("return document.body.dataset.pollMs") == "30000",
                   "the finished run's page asking every 30 s, not every 2 s", phone)
        # the learning rate's axis: its labels short enough for the room the axis takes
        labels = phone.execute_script("return [1.5e-3, 1e-3, 5e-4, 2.5e-5, 0].map(tickText)")
        assert labels == ["0.0015", "0.001", "5e-4", "2.5e-5", "0"], labels
        widths = phone.execute_script("""const c = document.createElement('canvas').getContext('2d');
            c.font = '12px system-ui, -apple-system, sans-serif';
            const labels = arguments[0]; return [axisSize(null, labels), Math.max(...labels.map(l => c.measureText(l).width))];""",
                                      labels)
        assert widths[0] >= widths[1] + 8, widths
        charts = lambda: phone.execute_script(  # noqa: E731
            "return [...document.querySelectorAll('#charts .uplot')].map(u => u.getBoundingClientRect().width)")
        portrait = charts()
        assert portrait and max(portrait) <= 390
        phone.set_window_size(844, 390)  # a turn to landscape
        wait_until(lambda: min(charts()) > max(portrait), "the charts growing with the turn", phone)
        phone.set_window_size(390, 844)
        wait_until(lambda: max(charts()) <= 390 - 16, "the charts shrinking back", phone)
        no_sideways_scrolling(phone, "the run page")
        assert small_tap_targets(phone) == []
        screenshot(phone, "67-zh-phone-run")

        # a preparation job's page: its log and events, no run controls, a way back to the tasks
        phone.get(base + "/launch")
        wait_until(lambda: find(phone, '#tasks li[data-task="examples/text_matching_pairwise.json"] button.prepare'),
                   "the matching example's preparation button", phone)
        tap(phone, find(phone, '#tasks li[data-task="examples/text_matching_pairwise.json"] button.prepare')[0])
        wait_until(lambda: "/runs/" in phone.current_url, "the job's page", phone)
        job = int(phone.current_url.rsplit("/", 1)[1])
        wait_until(lambda: find(phone, '#run-head .status[data-status="finished"]'), "the job finishing", phone)
        back = wait_until(lambda: find(phone, "#back-to-tasks"), "its way back to the tasks", phone)[0]
        assert back.text == "返回任务列表（这次准备好数据的任务现在可以启动）"
        assert not [e for e in find(phone, "#resume, #clone, #checkpoints, #smoothing") if e.is_displayed()]
        screenshot(phone, "67-zh-phone-job")

        # compare: Chinese curve names and titles; the data job is not a run to compare
        phone.get(base + f"/compare?ids={run_id}")
        wait_until(lambda: find(phone, "#compare-summary .progress"), "the compare page", phone)
        assert [o.text for o in find(phone, "#compare-metric option")][0] == "训练损失"
        assert not find(phone, f'.run-picker input[value="{job}"]') and find(phone, f'.run-picker input[value="{run_id}"]')
        assert "训练损失" in text_of(phone, "#compare-chart")
        no_sideways_scrolling(phone, "the compare page")
        assert small_tap_targets(phone) == []
        screenshot(phone, "67-zh-phone-compare")

        # the runs list: its buttons one height, every target a finger's
        phone.get(base + "/")
        wait_until(lambda: find(phone, "#runs tr[data-run] .progress"), "the runs list", phone)
        heights = {round(e.rect["height"]) for e in find(phone, "main p a.button, main p button")}
        assert len(heights) == 1, heights
        assert small_tap_targets(phone) == []
        no_sideways_scrolling(phone, "the runs list")
        screenshot(phone, "67-zh-phone-runs")

        # the desktop, in English
        browser.set_window_size(1366, 900)
        browser.get(base + "/launch")
        wait_until(lambda: find(browser, '#tasks li[data-ready="no"] .cause'), "the task list", browser)
        assert "made by training examples/pretraining_ernie_mlm.json first" in text_of(
            browser, '#tasks li[data-task="examples/text_classification_ernie.json"]')
        screenshot(browser, "67-en-tasks")
        browser.get(base + f"/runs/{run_id}")
        wait_until(lambda: find(browser, '#run-head .status[data-status="finished"]'), "the run", browser)
        assert "steps/s on average" in text_of(browser, "#run-outcome")
        no_sideways_scrolling(browser, "the run page")
        screenshot(browser, "67-en-run")

    # signing in: a page in the browser's language, with a field for the token
    with serving(root, monkeypatch, token="t" * 24) as server:
        chinese_browser.get(f"http://localhost:{server.port}/")
        wait_until(lambda: "登录 wenxin studio" in text_of(chinese_browser, "h1"), "the sign-in page in Chinese")
        field = find(chinese_browser, 'input[name="token"]')[0]
        field.send_keys("t" * 24)
        find(chinese_browser, "button")[0].click()
        wait_until(lambda: "运行记录" in text_of(chinese_browser, "h1"), "signed in, the runs page", chinese_browser)
