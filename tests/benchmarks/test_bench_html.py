"""Smoke run of bench_html: the standalone HTML page of a real fit."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_html_measures_a_real_page_without_script():
    """bench_html renders a real fit's page: 5 signatures by construction, four plots, no script."""
    doc = script_json(run_script(BENCH / "bench_html.py", "--rounds", "1"))
    assert (doc["benchmark"], doc["profiled_epochs"], doc["signatures"]) == ("html_report", [1, 2], 5)
    assert set(doc["plot_svg_bytes"]) == {"coverage", "top_ops", "timeline", "compare"}
    assert doc["scripts_on_page"] == 0
    assert sum(doc["plot_svg_bytes"].values()) < doc["page_bytes"]
    assert 0 < doc["page_bytes_gzip"] < doc["page_bytes"]
    assert all_positive(doc["first_render_s"], doc["render_s_median"])
