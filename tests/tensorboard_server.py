"""Test helpers: a real fit beside Keras' TensorBoard callback, and a real
`tensorboard` server process over its log directory."""

from __future__ import annotations

import gzip
import html.parser
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Legal in a Keras layer name (TF scope names allow `_ . - >`) and each one
# meaningful to Markdown, so the text panel must escape it.
HOSTILE_LAYER = "dense__hot__.a-b>c"
GUARD_RUN = "xla_guard"
PROFILED_EPOCHS = (1, 2)
SERVER_START_TIMEOUT_S = 180.0


@dataclass
class Fit:
    """What a test needs from a finished fit."""

    log_root: Path
    reports: dict[int, Any]
    history: dict[str, list[float]]
    signatures: dict[int, Any]


STEPS_PER_WINDOW = 4


def fit_beside_keras_tensorboard(log_root: Path) -> Fit:
    """Trains a tiny half-XLA model for 3 epochs with the guard writing to
    `<log_root>/xla_guard` and `keras.callbacks.TensorBoard(log_dir=log_root)`.

    Each train step runs the hostile-named first layer (forward, its
    backward and the SGD update) as plain TF ops and the rest (second
    layer, loss and their gradients) as one `tf.function(jit_compile=True)`
    call: every profiled step is exactly one XLA execution, and both the
    XLA and the non-XLA figures are non-zero.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    @tf.function(jit_compile=True)
    def xla_head(head, h, y):
        with tf.GradientTape() as tape:
            tape.watch(h)
            y_pred = head(h, training=True)
            loss = tf.reduce_mean(tf.square(y_pred - y))
        return y_pred, loss, tape.gradient(loss, [h, *head.trainable_variables])

    def train_step(data):
        x, y = data
        hostile, head = model.layers
        with tf.GradientTape() as tape:
            h = hostile(x, training=True)
        y_pred, loss, (dh, *head_grads) = xla_head(head, h, y)
        hostile_grads = tape.gradient(h, hostile.trainable_variables, output_gradients=dh)
        model.optimizer.apply(
            [*hostile_grads, *head_grads], [*hostile.trainable_variables, *head.trainable_variables]
        )
        for metric in model.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return model.get_metrics_result()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((320, 16)).astype("float32")
    y = x[:, :1] * 0.5
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(256, activation="relu", name=HOSTILE_LAYER),
            keras.layers.Dense(1),
        ]
    )
    model.compile("sgd", "mse", jit_compile=False)
    # Set on the instance, not by subclassing: Keras' TensorBoard callback
    # writes the model summary only for a model whose class is Sequential.
    model.train_step = train_step
    guard = XlaGuardCallback(
        log_dir=log_root / GUARD_RUN,
        profile_epochs=PROFILED_EPOCHS,
        max_steps=STEPS_PER_WINDOW,
        verbose=0,
    )
    board = keras.callbacks.TensorBoard(log_dir=str(log_root))
    history = model.fit(
        x, y, batch_size=32, epochs=3, validation_split=0.25, callbacks=[guard, board], verbose=0
    )
    return Fit(log_root, guard.reports, history.history, guard.signatures)


# TensorBoard prints where it listens once it has bound its socket.
_LISTENING = re.compile(rb"TensorBoard \S+ at http://127\.0\.0\.1:(\d+)/")


class TensorBoardServer:
    """A `tensorboard` subprocess on 127.0.0.1 and a port the OS picks.

    `--port 0` makes the server bind a free port itself and print it, so no
    port is chosen in one process and bound in another (no race).

    Args:
        logdir: The `--logdir`.
        output: File receiving the server's stdout and stderr.
    """

    def __init__(self, logdir: Path, output: Path) -> None:
        self.logdir = logdir
        self.output = output
        self.port: int | None = None
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, ready: Callable[[TensorBoardServer], bool]) -> None:
        """Starts the server and waits, bounded, until `ready(self)` holds.

        Raises:
            RuntimeError: If the server exits or is not ready in time.
        """
        binary = Path(sys.executable).with_name("tensorboard")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        with open(self.output, "wb") as out:
            self._proc = subprocess.Popen(
                [str(binary), "--logdir", str(self.logdir), "--host", "127.0.0.1", "--port", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self._proc.returncode}:\n{self.log_tail()}")
            if self.port is None:
                found = _LISTENING.search(self.output.read_bytes())
                if found:
                    self.port = int(found.group(1))
                    self.url = f"http://127.0.0.1:{self.port}"
            # Connection refused while the app loads its plugins: poll again.
            if self.port is not None and _poll(ready, self):
                return
            time.sleep(0.25)
        raise RuntimeError(f"tensorboard not ready after {SERVER_START_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminates the server (and with it its data server); kills it if it hangs."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's output."""
        return self.output.read_text(errors="replace")[-chars:] if self.output.exists() else ""

    def get(self, path: str, **params: str) -> bytes:
        """GETs `path` with query `params`; undoes gzip transfer encoding."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(self.url + path + query, timeout=30) as response:
            body = response.read()
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return body

    def json(self, path: str, **params: str) -> Any:
        """GETs `path` and decodes its JSON body."""
        return json.loads(self.get(path, **params))


def guard_data_loaded(server: TensorBoardServer) -> bool:
    """Whether the server serves every point of our run and of Keras' runs yet."""
    if not {GUARD_RUN, "train", "validation"} <= set(server.json("/data/runs")):
        return False
    scalar_tags = server.json("/data/plugin/scalars/tags")
    text_tags = server.json("/data/plugin/text/tags")
    if "xla_guard/report" not in text_tags.get(GUARD_RUN, []):
        return False
    expected = [
        (GUARD_RUN, "xla_guard/input_pipeline_time_s", len(PROFILED_EPOCHS)),
        ("train", "epoch_loss", 3),
        ("validation", "epoch_loss", 3),
    ]
    for run, tag, points in expected:
        if tag not in scalar_tags.get(run, {}):
            return False
        if len(server.json("/data/plugin/scalars/scalars", run=run, tag=tag)) < points:
            return False
    return len(server.json("/data/plugin/text/text", run=GUARD_RUN, tag="xla_guard/report")) >= len(
        PROFILED_EPOCHS
    )


def _poll(ready: Callable[[TensorBoardServer], bool], server: TensorBoardServer) -> bool:
    """`ready(server)`, or False while the server does not answer yet."""
    try:
        return ready(server)
    except OSError:
        return False


class HtmlTables(html.parser.HTMLParser):
    """Parses HTML: rows of every table (cell text with references decoded),
    the tags seen inside cells, all tags and the visible text."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.tags_in_cells: list[str] = []
        self.tags: list[str] = []
        self._text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(markup)
        self.close()

    @property
    def raw_text(self) -> str:
        """All text of the markup, exactly as parsed."""
        return "".join(self._text)

    @property
    def visible_text(self) -> str:
        """All text of the markup, whitespace collapsed."""
        return " ".join(self.raw_text.split())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif self._cell is not None:
            self.tags_in_cells.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)
