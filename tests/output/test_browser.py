"""Headless Chromium opens the real TensorBoard over a real fit and shows the
"XLA Guard" Custom Scalars charts and the escaped text panel; it opens the
standalone HTML report of the same fit offline (no request, no console
error, plots drawn, numbers equal to the report JSON) and takes the docs'
screenshot of it (into docs/images/html_report.png with `make docs-images`).

Needs the Debian packages `chromium` and `chromium-driver` (installed by
`make test`) and `selenium` (the `test` extra). Screenshots go to
`$XLA_GUARD_TEST_ARTIFACTS`, by default `test-artifacts/` in the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from _oracle import count_xla_runs
from tensorboard_server import (
    GUARD_RUN,
    HOSTILE_LAYER,
    STEPS_PER_WINDOW,
    TensorBoardServer,
    fit_beside_keras_tensorboard,
    guard_data_loaded,
)

from keras_xla_guard.output.tensorboard_metadata import layout_proto
from keras_xla_guard.trace.findings import split_findings

pytestmark = pytest.mark.slow

ARTIFACTS = Path(
    os.environ.get("XLA_GUARD_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
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
    # Console messages and the DevTools network events, for the HTML report's checks.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
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
        lambda d: (
            len(
                [
                    e
                    for e in d.execute_script(DEEP_QUERY_JS, "path.line")
                    if len(e.get_attribute("d") or "") > 10
                ]
            )
            >= 6
        ),
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


# ------------------------------------------------------------- the HTML report

# The page's picture goes to the test artifacts on every run; into the docs only when
# asked (XLA_GUARD_UPDATE_DOCS_IMAGES=1), so that `make test` leaves the tree clean.
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "html_report.png"
SAVED_COMPARE = (
    Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
)
# Every value of a profiled window's row, as the report JSON names it.
COVERAGE_FIELDS = (
    "xla_time_fraction",
    "xla_time_s",
    "non_xla_op_time_s",
    "xla_executions",
    "compilations",
    "compile_time_s",
    "input_pipeline_time_s",
)
# The page's number cells: section, row attributes, field, exact value (JSON) and shown text.
PAGE_VALUES_JS = """
return Array.from(document.querySelectorAll('td[data-field]')).map(td => {
  const section = td.closest('section'), row = td.closest('tr');
  const attrs = {};
  for (const a of row.attributes) attrs[a.name] = a.value;
  return [section.getAttribute('data-worker'), section.id, attrs, td.dataset.field,
          JSON.parse(td.dataset.value), td.innerText];
});
"""
# The top-ops chart's tick labels: text, the label's box and the SVG's, as drawn.
LABELS_JS = """
const svg = document.querySelector('figure[data-plot="top_ops"] svg'), box = svg.getBoundingClientRect();
return Array.from(svg.querySelectorAll('text')).map(t => {
  const b = t.getBoundingClientRect();
  return [t.textContent, b.left, b.right, b.width, box.left, box.right];
});
"""
# Each plot: its kind, its SVG's size, and how many of its shapes have a non-empty box.
PLOTS_JS = """
return Array.from(document.querySelectorAll('figure.plot')).map(f => {
  const svg = f.querySelector('svg'), box = svg.getBoundingClientRect();
  const drawn = Array.from(svg.querySelectorAll('path, rect')).filter(p => {
    const b = p.getBBox(); return b.width * b.height > 0; }).length;
  return [f.dataset.plot, box.width, box.height, drawn];
});
"""


def _cli(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    from keras_xla_guard.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", *args])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def html_report(fit, tmp_path_factory):
    """`report LOG_DIR --html` over the half-XLA fit, with a saved `compare` result; and the JSON."""
    work = tmp_path_factory.mktemp("html_report")
    compare = json.loads(SAVED_COMPARE.read_text())["result"]["cases"][0]["compare"]
    (work / "compare.json").write_text(json.dumps(compare))
    log_dir = fit.log_root / GUARD_RUN
    page = work / "report.html"
    code, _ = _cli(str(log_dir), "--all", "--html", str(page), "--compare", str(work / "compare.json"))
    assert code == 0
    code, out = _cli(str(log_dir), "--all", "--json")
    assert code == 0
    return page, json.loads(out), compare


def _load_offline(browser, page: Path) -> None:
    """Opens `page`; asserts no console error and no request but the page's own."""
    browser.get("about:blank")
    browser.get_log("performance")
    browser.get_log("browser")
    browser.get(page.as_uri())
    _wait_for(browser, lambda d: d.execute_script("return document.readyState") == "complete", "the page")
    requests = [
        m["params"]
        for m in (json.loads(e["message"])["message"] for e in browser.get_log("performance"))
        if m["method"] == "Network.requestWillBeSent"
    ]
    # The page's document is its one request; nothing anywhere left the machine
    # (Chromium's own new-tab page may still load chrome:// resources).
    ours = [r["request"]["url"] for r in requests if r.get("documentURL") == page.as_uri()]
    assert ours == [page.as_uri()], ours
    assert [
        r["request"]["url"] for r in requests if not r["request"]["url"].startswith(("chrome:", "file:"))
    ] == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


def test_html_report_loads_offline_and_draws_every_plot(html_report, browser) -> None:
    """The CLI's page loads with no request and no console error; its four plots are drawn."""
    page, _, _ = html_report
    _load_offline(browser, page)
    plots = browser.execute_script(PLOTS_JS)
    assert [p[0] for p in plots] == ["coverage", "top_ops", "timeline", "compare"]
    for kind, width, height, drawn in plots:
        assert width > 300 and height > 100, kind
        assert drawn >= 3, kind
    shot = ARTIFACTS / "html_report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1280, 1700)
    try:
        assert browser.save_screenshot(str(shot))
    finally:
        browser.set_window_size(1280, 1300)
    if os.environ.get("XLA_GUARD_UPDATE_DOCS_IMAGES") == "1":
        shutil.copyfile(shot, DOCS_SCREENSHOT)
    from PIL import Image

    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.width >= 1000 and rgb.height >= 1000
        assert len(rgb.resize((320, 240)).getcolors(maxcolors=320 * 240)) > 50


def test_html_report_top_op_labels_show_the_layer_whole(html_report, browser) -> None:
    """Each top-ops bar label ('<op type>  <layer>') is drawn inside the chart, the Keras layer's name not cut off."""
    page, _, _ = html_report
    _load_offline(browser, page)
    labels = [label for label in browser.execute_script(LABELS_JS) if "  " in label[0]]
    assert labels
    for text, left, right, width, svg_left, svg_right in labels:
        assert width > 0 and svg_left <= left and right <= svg_right, text
    assert any(text.endswith(f"  {HOSTILE_LAYER}") for text, *_ in labels)


def test_html_report_numbers_equal_the_report_json(html_report, browser, fit) -> None:
    """Every coverage, op, signature and compare number on the page is the JSON's value, exactly."""
    page, doc, compare = html_report
    browser.get(page.as_uri())
    values = browser.execute_script(PAGE_VALUES_JS)

    def value(field: str, section: str = "run", **row: str):
        (found,) = [
            v[4]
            for v in values
            if v[1] == section and v[3] == field and all(v[2].get(k) == str(x) for k, x in row.items())
        ]
        return found

    runs = {int(r["run"].rsplit("_epoch", 1)[1]): r["combined"] for r in doc["runs"]}
    assert sorted(runs) == sorted(fit.reports) == [1, 2]
    for epoch, combined in runs.items():
        for name in COVERAGE_FIELDS:
            assert value(name, **{"data-epoch": epoch}) == combined[name], (epoch, name)
        assert value("steps_profiled", **{"data-epoch": epoch}) == STEPS_PER_WINDOW
    # The op chart's table: the window with the most time outside XLA, op by
    # op above the noise floor, then one row with the rest of its plain time.
    worst = max(runs.values(), key=lambda r: r["non_xla_op_time_s"])
    split = split_findings(
        worst["top_non_xla_ops"],
        lambda op: op["self_time_s"],
        worst["xla_time_s"],
        worst["non_xla_op_time_s"],
    )
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.top-ops tbody tr')).map("
        "r => Array.from(r.cells).map(c => c.innerText))"
    )
    assert [r[3] for r in rows[: len(split.findings)]] == [op["op_name"] for op in split.findings]
    assert [r[1] for r in rows[len(split.findings) :]] == (["other"] if split.other_s > 0 else [])
    # The layer column names the Keras layer the guard saw, not a scope path.
    assert HOSTILE_LAYER in [r[2] for r in rows]
    for rank, op in enumerate(split.findings, 1):
        assert value("self_time_s", **{"data-rank": rank}) == op["self_time_s"]
        assert value("count", **{"data-rank": rank}) == op["count"]
    for epoch, stats in fit.signatures.items():
        for name in ("steps", "distinct_signatures", "new_signatures", "compilations_so_far"):
            assert value(name, **{"data-epoch": epoch, "class": "epoch-signatures"}) == getattr(stats, name)
    for mode, figures in compare["modes"].items():
        for name in ("step_time_s", "startup_s", "compilations", "compile_time_s"):
            assert value(name, "compare", **{"data-mode": mode}) == figures[name]
        assert value("projected_run_s", "compare", **{"data-mode": mode}) == compare["projected_run_s"][mode]
    lowest = min(r["xla_time_fraction"] for r in runs.values())
    level = "good" if lowest >= 0.9 else "partial" if lowest >= 0.5 else "low"
    verdict = browser.find_element("id", "verdict")
    assert verdict.get_attribute("data-level") == level
    assert f"XLA ran only {100 * lowest:.1f}% of op time" in verdict.text
    assert browser.find_element("id", "compare-verdict").text == compare["verdict"]
    assert browser.find_element("id", "exit-reason").text == (
        "keras-xla-guard report exits 0: no threshold violated (no threshold given)."
    )


def test_hostile_names_render_as_text_in_chromium(browser, tmp_path) -> None:
    """A page of markup and control-character names runs nothing and shows each name literally."""
    from _html import HOSTILE_NAMES, hostile_page
    from selenium.common.exceptions import NoAlertPresentException

    from keras_xla_guard.output.table import printable

    page = tmp_path / "hostile.html"
    page.write_text(hostile_page(), encoding="utf-8")
    _load_offline(browser, page)
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert browser.execute_script("return document.querySelectorAll('script, img, iframe').length") == 0
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.top-ops td.name')).map(c => c.innerText)"
    )
    for name in HOSTILE_NAMES:
        assert f"model/{printable(name)}/MatMul" in cells


@pytest.fixture(scope="module")
def seq_fit(tmp_path_factory):
    """A jit_compile fit over batches of 5 lengths that writes its page at train end (html_report=)."""
    from _fit_helpers import LENGTHS, _seq_dataset, _seq_model

    from keras_xla_guard import XlaGuardCallback

    work = tmp_path_factory.mktemp("seq_html")
    # A result `compare` saved in this log dir: the page at train end shows it.
    saved = work / "xla_guard" / "compare" / "compare_report.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(json.loads(SAVED_COMPARE.read_text())["result"]["cases"][1]["compare"]))
    guard = XlaGuardCallback(
        log_dir=work / "xla_guard", profile_epochs=(1,), verbose=0, html_report=work / "report.html"
    )
    _seq_model(True).fit(_seq_dataset(LENGTHS), epochs=2, callbacks=[guard], verbose=0)
    return guard, work / "report.html"


def test_page_written_at_train_end_shows_each_new_signature_on_the_timeline(seq_fit, browser) -> None:
    """html_report= writes the page when fit ends: a timeline mark per new signature at its step, the fix, the saved compare."""
    from _fit_helpers import HEADLINE

    guard, page = seq_fit
    _load_offline(browser, page)
    first = guard.signatures[0]
    explained = [f for f in first.explanations if f.kind in ("first_signature", "new_signature")]
    # Five lengths are five new signatures in epoch 0 (at steps 0, 1, 2, 4, 6);
    # the first three are explained one by one, the others shown as themselves.
    assert (first.new_signatures, [f.step for f in explained]) == (5, [0, 1, 2])
    assert [step for _, step in first.new] == [0, 1, 2, 4, 6]
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('table.events tbody tr')).map("
        "r => Array.from(r.cells).map(c => c.innerText))"
    )
    assert rows[:3] == [[str(f.step), "0", "train", str(f.step), f.message] for f in explained]
    assert [row[:4] for row in rows[3:]] == [["4", "0", "train", "4"], ["6", "0", "train", "6"]]
    # The others in the notation every output writes signatures in.
    assert [row[4] for row in rows[3:]] == [
        f"train compiled at step {s}: x['tokens']: int32[8,{n}], y: float32[8,1]"
        for s, n in ((4, 11), (6, 13))
    ]
    (timeline,) = [p for p in browser.execute_script(PLOTS_JS) if p[0] == "timeline"]
    assert timeline[1] > 300 and timeline[2] > 100
    marks = browser.execute_script(
        "return document.querySelectorAll('figure[data-plot=timeline] g[id$=new-signatures] use').length"
    )
    assert marks == first.new_signatures == 5
    findings = browser.find_element("css selector", "ul.findings").text
    assert HEADLINE in findings and "pad_to_buckets(dataset, (" in findings
    assert browser.find_element("id", "exit-reason").text == "Training ran to its end."
    compared = json.loads(SAVED_COMPARE.read_text())["result"]["cases"][1]["compare"]
    assert browser.find_element("id", "compare-verdict").text == compared["verdict"]
    seen = browser.find_element(
        "css selector", "tr.epoch-signatures[data-epoch='1'] td[data-field='compilations_so_far']"
    )
    assert seen.get_attribute("data-value") == "5" == str(guard.signatures[1].compilations_so_far)


LAYOUT_JS = """
const main = document.body.getBoundingClientRect();
const plots = Array.from(document.querySelectorAll('figure.plot')).map(f => {
  const svg = f.querySelector('svg').getBoundingClientRect();
  const legend = f.querySelector('g[id*="-legend_"]');
  const axes = f.querySelector('g[id*="-axes_"] > g[id*="-patch_"]');
  const inside = legend && axes ? [legend.getBoundingClientRect(), axes.getBoundingClientRect()] : null;
  return [f.dataset.plot, svg.width, inside && inside[0].left >= inside[1].left - 1 &&
          inside[0].right <= inside[1].right + 1];
});
const section = document.querySelector('section.worker').getBoundingClientRect();
return [document.documentElement.scrollWidth, window.innerWidth, section.width, plots];
"""


@pytest.mark.parametrize("width", [1280, 390])
def test_page_fits_the_window_at_desktop_and_phone_widths(seq_fit, browser, width) -> None:
    """At 1280 and 390 px: nothing wider than the window (wide tables scroll in their own box), every
    plot spans its section's width, and the coverage legend sits within the axes' width, not far beside."""
    _, page = seq_fit
    browser.set_window_size(width, 1000)
    try:
        _load_offline(browser, page)
        scroll, inner, section, plots = browser.execute_script(LAYOUT_JS)
    finally:
        browser.set_window_size(1280, 1000)
    assert scroll <= inner, (scroll, inner)
    assert plots and all(abs(w - section) <= 2 for _, w, _ in plots), (section, plots)
    assert [within for kind, _, within in plots if kind == "coverage"] == [True]
