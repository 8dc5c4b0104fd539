"""Which outputs a guard writes: the concrete `ReportSink`s for a config.

The one place where the built-in outputs are wired: a new built-in output
is a `ReportSink` in its own `output/` module, added here. The engine names
no output; the callback and the loop guard pass `default_sinks` to it.
"""

from __future__ import annotations

from keras_xla_guard.output.console import ConsoleSink
from keras_xla_guard.output.runfile import RunFileSink
from keras_xla_guard.output.tensorboard import TensorBoardSink
from keras_xla_guard.runtime.config import GuardConfig
from keras_xla_guard.runtime.sink import ReportSink

__all__ = ["default_sinks"]


def default_sinks(config: GuardConfig, *, tensorboard: bool | None = None) -> list[ReportSink]:
    """New sinks as `config` asks for them: TensorBoard and the run file in `log_dir`, the console.

    Args:
        config: The guard's config (`write_summaries`, `verbose`, `log_dir`).
        tensorboard: Include the TensorBoard sink and the run file
            (`xla_guard_reports.json`, read by `report --html`). A
            multi-worker run passes `False`: its `ClusterSink` writes both.
            Defaults to `None`: `config.write_summaries`.

    Returns:
        The sinks, TensorBoard first.

    Example:

    ```python
    from keras_xla_guard import GuardConfig, XlaGuardEngine
    from keras_xla_guard.output.sinks import default_sinks

    engine = XlaGuardEngine(GuardConfig(log_dir="logs/xla_guard"), sinks=default_sinks)
    ```
    """
    sinks: list[ReportSink] = []
    if config.write_summaries if tensorboard is None else tensorboard:
        # The run file beside the summaries feeds `report --html`.
        sinks += [TensorBoardSink(config.log_dir), RunFileSink(config.log_dir)]
    if config.verbose:
        sinks.append(ConsoleSink())
    return sinks
