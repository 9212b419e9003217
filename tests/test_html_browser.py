"""The HTML report in a real browser (headless Chromium through selenium).

A failing certification's page is opened and checked as a person reads it:
the failures come first, the outcome and class filters work, and every
label of the violation's timeline lies inside the visible page.

The browser is Debian's ``chromium`` and ``chromium-driver`` (``.ci/run``
installs them).  Where they are missing the test is skipped with a loud
reason on a developer's machine and *fails* in CI (``CI`` set), so a CI
that lost its browser cannot pass silently.
"""

from __future__ import annotations

import os
import shutil

import pytest
from cortex_spec.reports import write_html

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")


def _no_browser(why: str) -> None:
    message = (f"NO BROWSER: {why}; install Debian's chromium and chromium-driver "
               "(apt-get install -y chromium chromium-driver) to test the HTML report")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _no_browser("the selenium package is not installed (pip install .[test])")
    if CHROMIUM is None or DRIVER is None:
        _no_browser(f"chromium is {CHROMIUM or 'missing'}, chromedriver is {DRIVER or 'missing'}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1024,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser, failing_report, tmp_path):
    path = write_html(failing_report, tmp_path / "report.html")
    browser.get(path.resolve().as_uri())
    return browser


def _visible_rows(driver):
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#clauses tbody tr.clause'))"
        ".filter(r => r.offsetParent !== null).map(r => [r.dataset.id, r.dataset.outcome, r.dataset.class]);")


def test_failures_come_first(page, failing_report):
    rows = _visible_rows(page)
    assert len(rows) == len(failing_report["clauses"])
    failed = sum(1 for c in failing_report["clauses"] if c["outcome"] == "failed")
    assert failed > 0
    assert [o for _, o, _ in rows[:failed]] == ["failed"] * failed
    # and the first section after the class table is the failures, rule first
    first = page.find_element("css selector", ".clause-failure")
    assert first.find_element("css selector", ".badge").text == "failed"
    assert "expected" in first.text and "observed" in first.text and "replay" in first.text
    # clause text is rendered from Markdown: no raw backticks
    assert "`" not in first.find_element("css selector", ".rule").text


def test_the_filters_work(page):
    from selenium.webdriver.support.ui import Select

    for box in page.find_elements("css selector", ".f-outcome"):
        if box.get_attribute("value") != "passed":
            box.click()  # uncheck
    rows = _visible_rows(page)
    assert rows and {o for _, o, _ in rows} == {"passed"}
    Select(page.find_element("id", "f-class")).select_by_value("checkpoints")
    rows = _visible_rows(page)
    assert rows and {(o, c) for _, o, c in rows} == {("passed", "checkpoints")}
    assert page.find_element("id", "f-count").text.startswith(f"{len(rows)} of ")
    # sorting by clause id
    for box in page.find_elements("css selector", ".f-outcome"):
        if not box.is_selected():
            box.click()
    Select(page.find_element("id", "f-class")).select_by_value("")
    page.find_element("css selector", "th[data-key=id]").click()
    ids = [i for i, _, _ in _visible_rows(page)]
    assert ids == sorted(ids)


def test_every_timeline_label_lies_inside_the_visible_page(page, failing_report):
    assert failing_report["machines"]["concurrent"].get("violation"), "the failing run drew a timeline"
    boxes = page.execute_script(
        "return Array.from(document.querySelectorAll('.timeline .tl-label')).map(e => {"
        "  const r = e.getBoundingClientRect();"
        "  return [r.left, r.right, e.scrollWidth, e.clientWidth, e.textContent]; });")
    width = page.execute_script("return document.documentElement.clientWidth")
    assert boxes, "the timeline has labels"
    for left, right, scroll_w, client_w, text in boxes:
        assert 0 <= left and right <= width, (text, left, right, width)
        assert scroll_w <= client_w + 1, f"label clipped: {text!r}"
    # nothing of the page sticks out sideways
    assert page.execute_script("return document.documentElement.scrollWidth") <= width
    labels = [b[4] for b in boxes]
    assert any("resolve" in t and "resolved" in t for t in labels), labels  # the calls and their results
