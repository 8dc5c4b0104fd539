"""Benchmark: size and render time of the standalone HTML report.

Trains a real tiny Keras model (a sequence regressor over batches of five
lengths, plain TF ops so the op table is full; epochs 1 and 2 profiled),
then renders its page with `keras_xla_guard.output.html.render_html`, with
the `compare` result saved in benchmarks/results/ on the page as well.
Reports the page's size (raw and gzip-compressed, as CI artifact stores
keep it), each inline SVG plot's size, and the render time: the first
render and the median of the following ones.

For the docs' choice of library it also reports what one plotly page
would inline at least: plotly.js (`plotly.min.js`) from the installed
`plotly` package, or from a plotly wheel given with `--plotly-wheel`.

Usage:

```
.venv/bin/python benchmarks/bench_html.py [--rounds 5] [--plotly-wheel plotly-X-py3-none-any.whl]
```
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
SAVED_COMPARE = REPO / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
LENGTHS = (5, 7, 9, 5, 11, 7, 13, 9)


def _train(log_dir: Path):
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 16)(tokens))
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(keras.layers.Dense(32, "relu")(hidden)))
    model.compile("adam", "mse", jit_compile=False)
    rng = np.random.default_rng(0)
    batches = [
        (
            {"tokens": rng.integers(0, 50, (16, n)).astype("int32")},
            rng.standard_normal((16, 1)).astype("float32"),
        )
        for n in LENGTHS
    ]
    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
    guard = XlaGuardCallback(log_dir=log_dir, profile_epochs=(1, 2), skip_steps=0, verbose=0)
    model.fit(data, epochs=3, callbacks=[guard], verbose=0)
    return guard


def _plotly_js_bytes(wheel: str | None) -> tuple[int | None, str | None]:
    """Size of plotly.min.js and plotly's version, from a wheel or the installed package."""
    if wheel:
        with zipfile.ZipFile(wheel) as zf:
            (name,) = [n for n in zf.namelist() if n.endswith("package_data/plotly.min.js")]
            version = Path(wheel).name.split("-")[1]
            return zf.getinfo(name).file_size, version
    try:
        import plotly
    except ImportError:
        return None, None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return path.stat().st_size, plotly.__version__


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="renders timed after the first")
    parser.add_argument("--plotly-wheel", help="a plotly wheel to read plotly.min.js's size from")
    args = parser.parse_args()

    import matplotlib

    from keras_xla_guard._version import __version__
    from keras_xla_guard.output.html import render_html
    from keras_xla_guard.output.runfile import RunData

    with tempfile.TemporaryDirectory(prefix="bench_html_") as work:
        guard = _train(Path(work) / "xla_guard")
        reports, signatures = guard.reports, guard.signatures
    compare = json.loads(SAVED_COMPARE.read_text())["result"]["cases"][0]["compare"]

    def render() -> str:
        return render_html(
            [RunData.of("", reports, signatures)],
            exit_reason="Training ran to its end.",
            compare=compare,
            source="logs/xla_guard",
            tool_version=__version__,
        )

    start = time.perf_counter()
    page = render()
    first_s = time.perf_counter() - start
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        again = render()
        times.append(time.perf_counter() - start)
    assert again == page, "rendering is deterministic"
    data = page.encode("utf-8")
    plots = {
        kind: len(svg.encode("utf-8"))
        for kind, svg in re.findall(r'<figure class="plot" data-plot="(\w+)">(.*?)</figure>', page, re.S)
    }
    plotly_bytes, plotly_version = _plotly_js_bytes(args.plotly_wheel)
    print(
        json.dumps(
            {
                "benchmark": "html_report",
                "profiled_epochs": sorted(reports),
                "signatures": sum(s.new_signatures for s in signatures.values()),
                "top_ops": len(reports[1].top_non_xla_ops),
                "page_bytes": len(data),
                "page_bytes_gzip": len(gzip.compress(data, mtime=0)),
                "plot_svg_bytes": plots,
                "scripts_on_page": page.lower().count("<script"),
                "first_render_s": first_s,
                "render_s_median": statistics.median(times),
                "rounds": args.rounds,
                "matplotlib": matplotlib.__version__,
                "plotly_min_js_bytes": plotly_bytes,
                "plotly_version": plotly_version,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
