"""wenxin studio in a real browser (headless Chromium through Selenium): launch a run from the
form, watch it finish with its charts, checkpoints and events, try its exported model, clone it
with a changed value, compare the two, and delete one. Skipped where no Chromium and chromedriver
are installed (Debian: apt-get install chromium chromium-driver)."""
import os
import shutil
import time

import pytest

from studio_helpers import WAIT_SECONDS, make_root, serving

webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests drive Chromium with selenium")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = [pytest.mark.skipif(not (CHROMEDRIVER and CHROMIUM), reason="no Chromium and chromedriver here"),
              pytest.mark.slow]


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no driver download
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def wait_until(condition, what, browser=None):
    deadline = time.time() + WAIT_SECONDS
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    shown = f"; the page says: {text_of(browser, '#message')!r}" if browser is not None else ""
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


def test_launch_watch_try_clone_compare_and_delete_in_a_browser(tmp_path, monkeypatch, browser):
    root = str(tmp_path / "root")
    os.makedirs(root)
    make_root(root, epoch=4, save_inference=True)
    with serving(root, monkeypatch) as server:
        base = f"http://localhost:{server.port}"
        browser.get(base + "/")
        wait_until(lambda: text_of(browser, "h1") == "Runs", "the runs page")
        find(browser, "a.button")[0].click()  # "launch a run"
        wait_until(lambda: find(browser, "#tasks a"), "the task list")
        find(browser, "#tasks a")[0].click()
        rate = wait_until(lambda: find(browser, 'input[name="model.optimization.learning_rate"]'), "the form")[0]
        assert rate.get_attribute("value") == "0.01"  # the task file's value
        assert "wenxin train --param_path task.json" in text_of(browser, "#command")
        rate.clear()
        rate.send_keys("0.02")
        name = find(browser, "#run-name")[0]
        name.clear()
        name.send_keys("first")
        find(browser, "#start")[0].click()
        wait_until(lambda: "/runs/" in browser.current_url, "the run's page")
        wait_until(lambda: "finished" in text_of(browser, "#run-head .status"), "the run finishing")
        assert "--set model.optimization.learning_rate=0.02" in text_of(browser, "#run-head .command")
        charts = wait_until(lambda: len(find(browser, ".chart canvas")) >= 3 and find(browser, ".chart"), "charts")
        titles = {chart.get_attribute("data-chart") for chart in charts}
        assert {"loss", "lr", "dev acc"} <= titles
        assert len(find(browser, "#checkpoints tr")) > 1
        assert "finished" in text_of(browser, "#events")
        assert "done" in text_of(browser, "#log")

        # try the exported model
        box = wait_until(lambda: find(browser, "#try-text"), "the try box")[0]
        box.send_keys("好棒赞的书")
        find(browser, "#try-run")[0].click()
        wait_until(lambda: "label" in text_of(browser, "#try-output"), "a prediction")

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

        # the runs page lists both; delete the clone (confirmed by typing its name)
        browser.get(base + "/")
        wait_until(lambda: len(find(browser, "#runs tr[data-run]")) == 2, "two runs listed")
        assert {row.get_attribute("data-status") for row in find(browser, "#runs tr[data-run]")} == {"finished"}
        browser.get(base + "/runs/2")
        wait_until(lambda: find(browser, "#delete"), "the delete button")[0].click()
        alert = wait_until(lambda: _alert(browser), "the confirmation prompt")
        alert.send_keys("first (clone)")
        alert.accept()
        wait_until(lambda: browser.current_url.rstrip("/") == base, "back on the runs page")
        wait_until(lambda: len(find(browser, "#runs tr[data-run]")) == 1, "one run left")
        assert not os.path.exists(os.path.join(root, "studio_runs", "0002-first-clone"))


def _alert(browser):
    from selenium.common.exceptions import NoAlertPresentException
    try:
        return browser.switch_to.alert
    except NoAlertPresentException:
        return None
