"""Test helpers: a real fit beside Keras' TensorBoard callback, and a real
`tensorboard` server process over its log directory."""

from __future__ import annotations

import gzip
import html.parser
import json
import os
import socket
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


def fit_beside_keras_tensorboard(log_root: Path) -> Fit:
    """Trains a tiny plain-TF model for 3 epochs with the guard writing to
    `<log_root>/xla_guard` and `keras.callbacks.TensorBoard(log_dir=log_root)`."""
    import keras
    import numpy as np

    from keras_xla_guard import XlaGuardCallback

    rng = np.random.default_rng(0)
    x = rng.standard_normal((320, 16)).astype("float32")
    y = x[:, :1] * 0.5
    model = keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu", name=HOSTILE_LAYER),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=False)
    guard = XlaGuardCallback(
        log_dir=log_root / GUARD_RUN, profile_epochs=PROFILED_EPOCHS, max_steps=4, verbose=0
    )
    board = keras.callbacks.TensorBoard(log_dir=str(log_root))
    history = model.fit(
        x, y, batch_size=32, epochs=3, validation_split=0.25, callbacks=[guard, board], verbose=0
    )
    return Fit(log_root, guard.reports, history.history)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoardServer:
    """A `tensorboard` subprocess on 127.0.0.1 and a free port.

    Args:
        logdir: The `--logdir`.
        output: File receiving the server's stdout and stderr.
    """

    def __init__(self, logdir: Path, output: Path) -> None:
        self.logdir = logdir
        self.output = output
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
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
                [str(binary), "--logdir", str(self.logdir), "--host", "127.0.0.1",
                 "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                if ready(self):
                    return
            except OSError:
                pass
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
