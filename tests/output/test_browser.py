"""Headless Chromium opens the real TensorBoard over a real fit and shows the
"XLA Guard" Custom Scalars charts and the escaped text panel.

Needs the Debian packages `chromium` and `chromium-driver` (installed by
`make test`) and `selenium` (the `test` extra). Screenshots go to
`$XLA_GUARD_TEST_ARTIFACTS`, by default `test-artifacts/` in the repository.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from keras_xla_guard.output.tensorboard import layout_proto
from _oracle import count_xla_runs
from tensorboard_server import (
    GUARD_RUN,
    HOSTILE_LAYER,
    STEPS_PER_WINDOW,
    TensorBoardServer,
    fit_beside_keras_tensorboard,
    guard_data_loaded,
)

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("XLA_GUARD_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
PAGE_TIMEOUT_S = 90
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1300",  # tall enough for all five charts
]

# Text of the page with shadow DOMs flattened (TensorBoard's dashboards are
# Polymer elements), without style and script bodies.
DEEP_TEXT_JS = """
function walk(node, out) {
  if (node.shadowRoot) walk(node.shadowRoot, out);
  for (const child of node.childNodes) {
    if (child.nodeName === 'STYLE' || child.nodeName === 'SCRIPT') continue;
    if (child.nodeType === Node.TEXT_NODE) out.push(child.textContent);
    else walk(child, out);
  }
  return out;
}
return walk(document, []).join(' ').replace(/\\s+/g, ' ');
"""
# Elements matching a CSS selector anywhere, shadow DOMs included.
DEEP_QUERY_JS = """
const selector = arguments[0], found = [];
function walk(node) {
  if (node.shadowRoot) walk(node.shadowRoot);
  for (const child of node.children || []) {
    if (child.matches(selector)) found.push(child);
    walk(child);
  }
}
walk(document);
return found;
"""


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not installed: apt-get install -y chromium chromium-driver")
    return path


@pytest.fixture(scope="module")
def fit(tmp_path_factory):
    """One real half-XLA fit beside Keras' TensorBoard callback."""
    return fit_beside_keras_tensorboard(tmp_path_factory.mktemp("browser_fit"))


@pytest.fixture(scope="module")
def server(fit, tmp_path_factory):
    """A real `tensorboard` over the fit's log root."""
    tb = TensorBoardServer(fit.log_root, tmp_path_factory.mktemp("browser_server") / "tensorboard.log")
    try:
        tb.start(guard_data_loaded)
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by chromedriver, with a fresh profile; quit at teardown."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="xla_guard_chromium_") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def _wait_for(driver, condition, what: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    try:
        return WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.25).until(condition)
    except TimeoutException:
        shot = ARTIFACTS / "tensorboard_timeout.png"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shot))
        pytest.fail(f"page never showed {what} within {PAGE_TIMEOUT_S} s; see {shot}")


def _assert_picture(path: Path) -> None:
    """The screenshot is a real picture: large, many colours, and TensorBoard's orange bar."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB")
        assert rgb.width >= 1000 and rgb.height >= 600
        assert len(rgb.resize((320, 240)).getcolors(maxcolors=320 * 240)) > 50
        r, g, b = rgb.getpixel((rgb.width // 2, 10))
        assert r > 200 and 80 < g < 160 and b < 60


def test_custom_scalars_dashboard_shows_the_xla_guard_charts(server, browser) -> None:
    """The Custom Scalars tab shows the "XLA Guard" category, its charts and drawn lines."""
    titles = [c.title for c in layout_proto().category[0].chart]
    browser.get(f"{server.url}/#custom_scalars")
    wanted = ["XLA Guard", *titles, f"xla_guard/coverage_percent ({GUARD_RUN})"]

    def charts_listed(driver) -> str | bool:
        text = driver.execute_script(DEEP_TEXT_JS)
        return text if all(w in text for w in wanted) else False

    text = _wait_for(browser, charts_listed, "the XLA Guard charts")
    assert text.count("Matches (") == len(titles)
    # One line per tag with data: coverage, 2 op times, compilations, compile
    # time, input pipeline (new_signatures has no data in this run).
    _wait_for(
        browser,
        lambda d: len([e for e in d.execute_script(DEEP_QUERY_JS, "path.line")
                       if len(e.get_attribute("d") or "") > 10]) >= 6,
        "a drawn line in every chart",
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "tensorboard_custom_scalars.png"
    assert browser.save_screenshot(str(shot))
    _assert_picture(shot)


def test_text_dashboard_shows_the_op_table_literally(server, browser, fit) -> None:
    """The Text tab shows each epoch's non-zero coverage and the hostile layer name as plain text."""
    browser.get(f"{server.url}/#text")
    _wait_for(
        browser,
        lambda d: [c for c in d.execute_script(DEEP_QUERY_JS, "td") if HOSTILE_LAYER in c.text],
        "the report table",
    )
    cells = [c for c in browser.execute_script(DEEP_QUERY_JS, "td") if HOSTILE_LAYER in c.text]
    assert all(c.find_elements("css selector", "*") == [] for c in cells)
    assert any(c.text.startswith("StatefulPartitionedCall/") for c in cells)
    text = browser.execute_script(DEEP_TEXT_JS)
    for report in fit.reports.values():
        # The raw trace holds one executable run per profiled step (counted
        # without the package), so the coverage shown cannot be 0.
        assert count_xla_runs(Path(report.trace_paths[0])) == STEPS_PER_WINDOW
        assert 0 < report.xla_time_fraction < 1
        assert f"XLA coverage: {100 * report.xla_time_fraction:.1f}%" in text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "tensorboard_text.png"
    assert browser.save_screenshot(str(shot))
    _assert_picture(shot)
