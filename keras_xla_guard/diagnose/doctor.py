"""`doctor()`: why XLA does or does not run in this process, layer by layer.

Three layers, each reported as facts plus verdicts with stable codes (see
docs/diagnosis.md, "Verdict codes"):

- runtime: TensorFlow/Keras versions, physical devices, and whether XLA
  compiles and runs a tiny `jit_compile=True` function on each device;
- switches: `tf.config.optimizer.get_jit()`, `TF_XLA_FLAGS` as set now and
  as TensorFlow parsed it, Keras' resolution of `jit_compile="auto"`, and
  `TF_ENABLE_ONEDNN_OPTS` (unrelated to XLA);
- effectiveness, measured: a small auto-clusterable function runs in a child
  process under this process' settings, under the profiler, and its trace is
  analyzed like a training trace (`probe.py`). TensorFlow's own XLA log
  lines from that run are kept.

With a trace, the compile-cost verdicts (`compile_cost.py`) are added.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from keras_xla_guard._checks import check_bool
from keras_xla_guard.backend.xla_cache import PersistentCache, persistent_cache, recommended_flags
from keras_xla_guard.diagnose.advice import JitEvidence, blocked_verdict, switch_fix
from keras_xla_guard.diagnose.compile_cost import compile_cost_verdicts
from keras_xla_guard.diagnose.probe import (
    PROBE_MODULE,
    ProbeResult,
    ProbeRun,
    finish_probe,
    start_probe,
)
from keras_xla_guard.diagnose.verdict import (
    EFFECTIVENESS,
    ERROR,
    INFO,
    OK,
    RUNTIME,
    SWITCHES,
    WARNING,
    Verdict,
)

__all__ = [
    "DeviceCheck",
    "DoctorReport",
    "doctor",
    "format_doctor_report",
    "parse_tf_xla_flags",
]

DEFAULT_PROBE_TIMEOUT_S = 120.0
_CPU_FLAG = "--tf_xla_cpu_global_jit"
_FIX_CPU_FLAG = (
    # The user asked for auto-clustering, but XLA on a CPU is often slower: the fix makes the
    # request effective only after saying how to check that it pays (advice.measure_first).
    "# Whether auto-clustering pays on this CPU is not measured: measure it first\n"
    "# (keras-xla-guard compare module:fn --modes plain autoclustering),\n"
    "# or stop asking for it (tf.config.optimizer.set_jit(False)). To make it take effect,\n"
    "# set the flag before TensorFlow is imported (first lines of your script):\n"
    "import os\n"
    'os.environ["TF_XLA_FLAGS"] = (os.environ.get("TF_XLA_FLAGS", "") + '
    '" --tf_xla_cpu_global_jit").strip()\n'
    "import tensorflow as tf\n"
    "tf.config.optimizer.set_jit(True)\n"
    "# or from the shell: export TF_XLA_FLAGS=--tf_xla_cpu_global_jit"
)


_FIX_XLA_DEVICES_FLAG = (
    "# Whether XLA pays on this CPU is not measured: measure it first\n"
    "# (keras-xla-guard compare module:fn --modes plain jit_compile), then ask for XLA\n"
    "# per model rather than through this flag, which nothing else needs:\n"
    "model.compile(optimizer, loss, jit_compile=False)  # True where compare measured that it pays\n"
    "# and drop --tf_xla_enable_xla_devices from TF_XLA_FLAGS."
)


def _fix_jit_compile(evidence: JitEvidence) -> str:
    """The fix of a finding that XLA is off: measured or hedged (`advice.switch_fix`)."""
    fix = switch_fix(evidence)
    if evidence.blockers or evidence.compare is not None:
        return fix
    return fix + "\n# for your own train step: @tf.function(jit_compile=True), measured the same way"


@dataclass(frozen=True)
class DeviceCheck:
    """Whether XLA compiled and ran a tiny function on one device.

    Attributes:
        device: Logical device name, e.g. `"/device:CPU:0"`.
        device_type: `"CPU"`, `"GPU"`, `"TPU"`, ...
        xla_ok: Whether a `jit_compile=True` function compiled, ran and
            returned the right value there.
        error: The error text when it did not; `""` otherwise.
    """

    device: str
    device_type: str
    xla_ok: bool
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Returns the check as a JSON-serializable dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DoctorReport:
    """Facts and verdicts about XLA in this process.

    Attributes:
        python_version: `platform.python_version()`.
        tf_version: `tf.__version__`.
        keras_version: `keras.__version__`, or `None` if Keras is missing.
        keras_backend: Keras' backend name, or `None`.
        physical_devices: Physical device types and names, e.g.
            `("CPU:/physical_device:CPU:0",)`.
        device_checks: One XLA compile-and-run check per logical device
            (empty when `check_devices=False`).
        get_jit: `tf.config.optimizer.get_jit()` (`""` when off).
        tf_xla_flags: `TF_XLA_FLAGS` in `os.environ` now (`None` if unset).
        env_auto_jit: `--tf_xla_auto_jit` parsed from that value, or `None`.
        env_cpu_global_jit: Whether that value contains
            `--tf_xla_cpu_global_jit`.
        tf_cpu_global_jit: The `tf_xla_cpu_global_jit` value TensorFlow
            itself holds (it reads `TF_XLA_FLAGS` once, on first use);
            `None` if TensorFlow does not expose it.
        keras_auto_jit_compile: What Keras resolves `jit_compile="auto"`
            to on this machine for a plain model; `None` without Keras.
        in_distribution_strategy: Whether a `tf.distribute` strategy is
            active (Keras then resolves `"auto"` to False too).
        onednn_opts: `TF_ENABLE_ONEDNN_OPTS` (`None` if unset).
        probe: The measured effectiveness probe, or `None` if skipped.
        verdicts: All verdicts, runtime first.
        seconds: Time `doctor()` took.
    """

    python_version: str
    tf_version: str
    keras_version: str | None
    keras_backend: str | None
    physical_devices: tuple[str, ...]
    device_checks: tuple[DeviceCheck, ...]
    get_jit: str
    tf_xla_flags: str | None
    env_auto_jit: str | None
    env_cpu_global_jit: bool
    tf_cpu_global_jit: bool | None
    keras_auto_jit_compile: bool | None
    in_distribution_strategy: bool
    onednn_opts: str | None
    probe: ProbeResult | None
    verdicts: tuple[Verdict, ...]
    seconds: float = 0.0

    @property
    def problems(self) -> tuple[Verdict, ...]:
        """The verdicts with status `"warning"` or `"error"`."""
        return tuple(v for v in self.verdicts if v.status in (WARNING, ERROR))

    def verdict(self, code: str) -> Verdict | None:
        """Returns the verdict with this code, or `None`.

        Args:
            code: A verdict code, e.g. `"XLA_BACKEND_OK"`.

        Returns:
            The first verdict with that code, or `None`.
        """
        return next((v for v in self.verdicts if v.code == code), None)

    @property
    def codes(self) -> tuple[str, ...]:
        """The verdict codes, in report order."""
        return tuple(v.code for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["physical_devices"] = list(self.physical_devices)
        d["device_checks"] = [c.to_dict() for c in self.device_checks]
        d["probe"] = self.probe.to_dict() if self.probe is not None else None
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        return d

    def __str__(self) -> str:
        return format_doctor_report(self)


def parse_tf_xla_flags(value: str | None) -> tuple[str | None, bool]:
    """Reads the two auto-clustering switches out of a `TF_XLA_FLAGS` value.

    Args:
        value: The environment variable's value, or `None` when unset.

    Returns:
        `(auto_jit, cpu_global_jit)`: the `--tf_xla_auto_jit` value as
        written (`None` when absent) and whether `--tf_xla_cpu_global_jit`
        is on.

    Example:

    ```python
    from keras_xla_guard.diagnose.doctor import parse_tf_xla_flags
    parse_tf_xla_flags("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit")
    # ('2', True)
    ```
    """
    auto_jit: str | None = None
    cpu_global_jit = False
    for token in (value or "").split():
        name, _, arg = token.partition("=")
        if name == "--tf_xla_auto_jit":
            auto_jit = arg
        elif name == _CPU_FLAG:
            cpu_global_jit = arg.lower() not in ("0", "false")
    return auto_jit, cpu_global_jit


def _auto_jit_requested(auto_jit: str | None) -> bool:
    if auto_jit is None:
        return False
    # `single-gpu(N)` requests auto-clustering on one GPU only.
    if auto_jit.startswith("single-gpu"):
        return True
    return auto_jit.lstrip("-").isdigit() and int(auto_jit) > 0


def _tf_cpu_global_jit() -> bool | None:
    """The `tf_xla_cpu_global_jit` value TensorFlow holds right now."""
    from keras_xla_guard.seam.tf_internals import cpu_global_jit

    return cpu_global_jit()


def _device_checks() -> tuple[DeviceCheck, ...]:
    import numpy as np
    import tensorflow as tf

    checks = []
    for device in tf.config.list_logical_devices():
        try:
            with tf.device(device.name):
                double_plus_one = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)
                got = double_plus_one(tf.constant([1.0, 2.0])).numpy()
            ok = bool(np.allclose(got, [3.0, 5.0]))
            error = "" if ok else f"wrong result {got!r}"
        except Exception as e:  # noqa: BLE001 - the failure is the finding
            ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        checks.append(DeviceCheck(device.name, device.device_type, ok, error))
    return tuple(checks)


def keras_backend_setting() -> str | None:
    """The backend Keras is configured with, read as Keras reads it, without importing Keras.

    Returns:
        `KERAS_BACKEND`, else `"backend"` in `$KERAS_HOME/keras.json`
        (`~/.keras/keras.json`); `None` when neither sets one.
    """
    configured = os.environ.get("KERAS_BACKEND")
    if configured is not None:
        return configured
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return backend if isinstance(backend, str) else None


def _keras_facts(resolve: bool) -> tuple[str | None, str | None, bool | None]:
    try:
        import keras
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("keras")
        except PackageNotFoundError:
            return None, None, None
        # Installed, but the backend it is configured with cannot start
        # (KERAS_BACKEND=torch without torch): that backend is the finding.
        return installed, keras_backend_setting(), None
    backend = keras.backend.backend()
    if backend != "tensorflow" or not resolve:
        return keras.__version__, backend, None
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile="auto")
    return keras.__version__, backend, bool(model.jit_compile)


def _runtime_verdicts(
    checks: Sequence[DeviceCheck], cache_verdict: Verdict | None, explained: Sequence[str]
) -> list[Verdict]:
    """Per device OK or MISSING; devices whose failure `cache_verdict` explains get only it."""
    verdicts = []
    for check in checks:
        if check.device in explained:
            continue
        if check.xla_ok:
            verdicts.append(
                Verdict(
                    "XLA_BACKEND_OK",
                    RUNTIME,
                    OK,
                    f"XLA compiled and ran a jit_compile=True function on {check.device}.",
                )
            )
        else:
            verdicts.append(
                Verdict(
                    "XLA_BACKEND_MISSING",
                    RUNTIME,
                    ERROR,
                    f"XLA could not compile or run a jit_compile=True function on "
                    f"{check.device}: {check.error}",
                    "# The error above says why. If it names a missing XLA backend or kernel, this\n"
                    "# TensorFlow build lacks one: install an official build of the same version\n"
                    "# (keeps Keras, tf_keras and CUDA matched), e.g.:\n"
                    "#   pip install tensorflow==<your version>  # tensorflow[and-cuda]==... on GPUs\n"
                    "# If it names ptxas, libdevice, memory or the driver, fix that instead:\n"
                    "# reinstalling TensorFlow does not.",
                )
            )
    if cache_verdict is not None:
        verdicts.append(cache_verdict)
    return verdicts


def _cache_write_error(directory: str) -> str:
    """Why TensorFlow cannot write into `directory`, in TensorFlow's words; `""` when it can.

    Creates the directory as TensorFlow's cache does, then writes and
    removes one small file, through TensorFlow's own file system layer
    (`tf.io.gfile`): remote paths (`gs://...`) behave, and an error reads
    as it does when TensorFlow stores a compiled program there.
    """
    import tensorflow as tf

    path = tf.io.gfile.join(directory, f".keras_xla_guard_doctor_{os.getpid()}.tmp")
    try:
        tf.io.gfile.makedirs(directory)
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(b"x")
        tf.io.gfile.remove(path)
    except tf.errors.OpError as e:
        return f"{type(e).__name__}: {e.message}"
    return ""


def _cache_verdict(
    cache: PersistentCache | None,
    checks: Sequence[DeviceCheck],
    probe: ProbeResult | None,
    tf_xla_flags: str | None,
) -> tuple[Verdict | None, tuple[str, ...]]:
    """`XLA_CACHE_DIR_UNWRITABLE` when XLA failed here and the cache directory cannot be written.

    Returns the verdict (or `None`) and the devices whose failed check it
    explains.

    TensorFlow (2.21, measured) writes every program it compiles into a
    writable persistent cache and fails the compilation when it cannot;
    with `--tf_xla_persistent_cache_read_only` it never writes, and a
    missing or unwritable directory is no error. The directory is only
    tried after a compilation here failed, so a healthy run leaves nothing
    behind that TensorFlow itself would not have written.
    """
    if cache is None or cache.read_only:
        return None, ()
    # An empty device list means the cache serves every device type.
    devices = tuple(
        c.device
        for c in checks
        if not c.xla_ok and (not cache.device_types or c.device_type in cache.device_types)
    )
    failed = [f"jit_compile=True on {d}" for d in devices]
    if probe is not None and not probe.ran and not probe.timed_out:
        failed.append("the auto-clustering probe")
    if not failed:
        return None, ()
    error = _cache_write_error(cache.directory)
    if not error:
        return None, ()
    read_only = " ".join([*shlex.split(tf_xla_flags or ""), "--tf_xla_persistent_cache_read_only=true"])
    verdict = Verdict(
        "XLA_CACHE_DIR_UNWRITABLE",
        RUNTIME,
        ERROR,
        f"TensorFlow's persistent compilation cache directory {cache.directory!r} "
        f"(--tf_xla_persistent_cache_directory in TF_XLA_FLAGS) cannot be written: {error}. "
        "TensorFlow stores every program it compiles there, so every XLA compilation "
        f"fails in this process (failed here: {', '.join(failed)}).",
        "# TensorFlow reads TF_XLA_FLAGS once, at start: set it before starting Python.\n"
        "# Cache in a directory this user can write (TensorFlow creates it):\n"
        f"{recommended_flags()}\n"
        "# or only load the programs already stored there (nothing is ever written):\n"
        f'export TF_XLA_FLAGS="{read_only}"',
    )
    return verdict, devices


def _switch_verdicts(
    *,
    get_jit: str,
    env_auto_jit: str | None,
    env_cpu_global_jit: bool,
    tf_cpu_global_jit: bool | None,
    keras_backend: str | None,
    keras_auto_jit_compile: bool | None,
    in_strategy: bool,
    has_accelerator: bool,
    tf_xla_flags: str | None,
    onednn_opts: str | None,
    jit_fix: str,
) -> list[Verdict]:
    verdicts = []
    requested = bool(get_jit) or _auto_jit_requested(env_auto_jit)
    if requested:
        how = (
            f"tf.config.optimizer.get_jit() is {get_jit!r}"
            if get_jit
            else f"TF_XLA_FLAGS has --tf_xla_auto_jit={env_auto_jit}"
        )
        verdicts.append(Verdict("AUTOJIT_REQUESTED", SWITCHES, INFO, f"Auto-clustering is requested: {how}."))
    else:
        verdicts.append(
            Verdict(
                "XLA_NOT_REQUESTED",
                SWITCHES,
                WARNING,
                "Auto-clustering is off (tf.config.optimizer.get_jit() is '' and TF_XLA_FLAGS "
                "has no --tf_xla_auto_jit), so only functions and models compiled with "
                "jit_compile=True run under XLA.",
                jit_fix,
            )
        )
    if env_cpu_global_jit and tf_cpu_global_jit is False:
        verdicts.append(
            Verdict(
                "CPU_FLAG_SET_TOO_LATE",
                SWITCHES,
                ERROR,
                f"TF_XLA_FLAGS={tf_xla_flags!r} contains --tf_xla_cpu_global_jit now, but "
                "TensorFlow had already read its flags without it (it reads TF_XLA_FLAGS "
                "once, on first use), so CPU auto-clustering stays off in this process.",
                _FIX_CPU_FLAG,
            )
        )
    if keras_backend is not None and keras_backend != "tensorflow":
        verdicts.append(
            Verdict(
                "KERAS_BACKEND_NOT_TENSORFLOW",
                SWITCHES,
                WARNING,
                f"Keras runs on backend={keras_backend!r}; TensorFlow's XLA switches do not apply.",
                "# Select the TensorFlow backend before importing Keras:\n"
                "import os\n"
                'os.environ["KERAS_BACKEND"] = "tensorflow"\n'
                "import keras",
            )
        )
    if keras_auto_jit_compile is False:
        why = []
        if not has_accelerator:
            why.append("this machine has no GPU/TPU")
        if in_strategy:
            why.append("a tf.distribute strategy is active")
        reason = " and ".join(why) or "a layer does not support XLA or op determinism is on"
        verdicts.append(
            Verdict(
                "JIT_COMPILE_AUTO_RESOLVES_FALSE",
                SWITCHES,
                WARNING,
                f"Keras resolves model.compile(jit_compile='auto') to False here ({reason}), "
                "so a default Keras model trains without XLA.",
                jit_fix,
            )
        )
    elif keras_auto_jit_compile:
        verdicts.append(
            Verdict(
                "JIT_COMPILE_AUTO_RESOLVES_TRUE",
                SWITCHES,
                OK,
                "Keras resolves model.compile(jit_compile='auto') to True here for models "
                "whose layers all support XLA.",
            )
        )
    if tf_xla_flags and "--tf_xla_enable_xla_devices" in tf_xla_flags:
        if keras_auto_jit_compile and not has_accelerator:
            # Measured (TF 2.21, Keras 3.15): Keras' "auto" asks whether any physical
            # device is not a CPU, and the flag's XLA_CPU device is not.
            verdicts.append(
                Verdict(
                    "XLA_DEVICES_FLAG_SWITCHES_KERAS_AUTO",
                    SWITCHES,
                    WARNING,
                    "--tf_xla_enable_xla_devices makes TensorFlow list an XLA_CPU device, which Keras "
                    "takes for an accelerator: on this machine without GPU/TPU it is why "
                    "model.compile(jit_compile='auto'), the default, resolves to True, so every "
                    "Keras model trains under XLA. jit_compile=True and auto-clustering do not need "
                    "the flag.",
                    _FIX_XLA_DEVICES_FLAG,
                )
            )
        else:
            verdicts.append(
                Verdict(
                    "XLA_DEVICES_FLAG_OBSOLETE",
                    SWITCHES,
                    INFO,
                    "--tf_xla_enable_xla_devices only makes TensorFlow list XLA_CPU/XLA_GPU devices; "
                    "jit_compile=True and auto-clustering compile with XLA without them, and here "
                    "Keras' jit_compile='auto' does not depend on them either.",
                )
            )
    verdicts.append(
        Verdict(
            "ONEDNN_UNRELATED",
            SWITCHES,
            INFO,
            f"TF_ENABLE_ONEDNN_OPTS={onednn_opts if onednn_opts is not None else '(unset)'}: "
            "oneDNN speeds up single CPU kernels; it neither enables, blocks nor silences XLA.",
        )
    )
    return verdicts


def _cpu_flag_missing(evidence: str) -> Verdict:
    return Verdict(
        "AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING",
        EFFECTIVENESS,
        ERROR,
        "Auto-clustering is requested but not effective on this CPU-only machine, "
        "because --tf_xla_cpu_global_jit was not in TF_XLA_FLAGS when TensorFlow read "
        f"its flags ({evidence}). TensorFlow prints nothing about this.",
        _FIX_CPU_FLAG,
    )


def _effectiveness_verdicts(
    probe: ProbeResult,
    *,
    requested: bool,
    has_accelerator: bool,
    tf_cpu_global_jit: bool | None,
    cache_verdict: Verdict | None,
    jit_fix: str,
) -> list[Verdict]:
    if not probe.ran and not probe.timed_out and cache_verdict is not None:
        return [
            Verdict(
                "PROBE_FAILED",
                EFFECTIVENESS,
                WARNING,
                "The auto-clustering probe did not produce a measurement: its XLA compilation "
                f"failed on the persistent cache directory (XLA_CACHE_DIR_UNWRITABLE): {probe.error}",
                cache_verdict.fix,
            )
        ]
    if not probe.ran:
        return [
            Verdict(
                "PROBE_FAILED",
                EFFECTIVENESS,
                WARNING,
                f"The auto-clustering probe did not produce a measurement: {probe.error}",
                f"{sys.executable} -m {PROBE_MODULE} --jit autoclustering",
            )
        ]
    measured = (
        f"measured: {probe.xla_time_fraction:.0%} of the probe's op time ran inside XLA "
        f"({probe.xla_executions} XLA launches, {probe.compilations} compilations)"
    )
    if probe.ran_under_xla:
        return [
            Verdict(
                "AUTOJIT_EFFECTIVE",
                EFFECTIVENESS,
                OK,
                f"Auto-clustering is effective: {measured}.",
            )
        ]
    if not requested:
        return [
            Verdict(
                "AUTOJIT_OFF",
                EFFECTIVENESS,
                INFO,
                f"As expected with auto-clustering off, no op of the probe ran under XLA; {measured}.",
            )
        ]
    if not has_accelerator and not tf_cpu_global_jit:
        return [_cpu_flag_missing(measured)]
    return [
        Verdict(
            "AUTOJIT_NOT_EFFECTIVE",
            EFFECTIVENESS,
            ERROR,
            f"Auto-clustering is requested but the probe did not run under XLA; {measured}.",
            jit_fix,
        )
    ]


def doctor(
    probe: bool = True,
    check_devices: bool = True,
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    resolve_keras: bool = True,
    trace: Any = None,
    compare: Any = None,
) -> DoctorReport:
    """Diagnoses whether and why XLA runs in this process.

    Imports TensorFlow (and Keras, when installed). The probe starts one
    child Python process (a few seconds) and passes it this process'
    environment, `get_jit()` state and the `--tf_xla_cpu_global_jit` value
    TensorFlow holds here. Reading that value makes TensorFlow read
    `TF_XLA_FLAGS` now if it has not yet.

    Args:
        probe: Measure auto-clustering in a child process. Defaults to
            `True`.
        check_devices: Compile and run a tiny `jit_compile=True` function on
            every logical device. Defaults to `True`.
        probe_timeout: Seconds the probe may take. Defaults to `120`.
        resolve_keras: Compile a throwaway one-layer Keras model to read
            what `jit_compile="auto"` resolves to (it advances Keras'
            automatic layer names by one). Defaults to `True`.
        trace: A trace of a run (file, run or log dir, as `analyze_trace`
            takes) or its `CoverageReport`: adds `COMPILE_COST_HIGH` when
            compilation is a large share of it, with the persistent-cache
            line, and `JIT_COMPILE_BLOCKED` first when the run's step ran
            ops XLA cannot compile (no XLA switch is advised then).
            Defaults to `None`.
        compare: A `compare` result (`CompareReport` or its `to_dict()`)
            for this model: the advice on XLA's switches follows its
            measured verdict instead of asking to measure first (the CLI
            passes the one saved in `--trace`'s log dir). Defaults to
            `None`.

    Returns:
        A `DoctorReport`.

    Raises:
        ValueError: If `probe_timeout` is not a positive number, or a flag
            is not `True` or `False`.

    Example:

    ```python
    from keras_xla_guard import doctor
    report = doctor()
    print(report)
    for verdict in report.problems:
        print(verdict.code, verdict.fix)
    ```
    """
    if (
        isinstance(probe_timeout, bool)
        or not isinstance(probe_timeout, (int, float))
        or not 0 < probe_timeout < math.inf
    ):
        raise ValueError(
            f"`probe_timeout` must be a positive number of seconds. Received: probe_timeout={probe_timeout!r}"
        )
    for name, flag in (("probe", probe), ("check_devices", check_devices), ("resolve_keras", resolve_keras)):
        check_bool(name, flag)
    compile_verdicts: list[Verdict] = []
    blockers: tuple[str, ...] = ()
    if trace is not None:
        from keras_xla_guard.diagnose.explain import blocker_names, trace_blockers
        from keras_xla_guard.trace.analysis import analyze_trace
        from keras_xla_guard.trace.report import CoverageReport

        analyzed = trace if isinstance(trace, CoverageReport) else analyze_trace(trace)
        compile_verdicts = compile_cost_verdicts(analyzed)
        if analyzed.ok:
            blockers = blocker_names(trace_blockers(analyzed))
    evidence = JitEvidence(
        blockers=blockers, compare=compare.to_dict() if hasattr(compare, "to_dict") else compare
    )
    started = time.perf_counter()
    early_probe = None
    if probe and "tensorflow" not in sys.modules:
        # TensorFlow holds no state here yet (auto-clustering off, flags as in
        # the environment), so a child started now sees the same settings;
        # starting it first lets both TensorFlow imports overlap.
        early_probe = start_probe("", None)
    try:
        report = _doctor(
            started, early_probe, probe, check_devices, float(probe_timeout), resolve_keras, evidence
        )
        return dataclasses.replace(report, verdicts=report.verdicts + tuple(compile_verdicts))
    finally:
        if early_probe is not None and early_probe[0].poll() is None:
            early_probe[0].kill()
            early_probe[0].communicate()


def _doctor(
    started: float,
    early_probe: ProbeRun | None,
    probe: bool,
    check_devices: bool,
    probe_timeout: float,
    resolve_keras: bool,
    evidence: JitEvidence,
) -> DoctorReport:
    import tensorflow as tf

    physical = tf.config.list_physical_devices()
    # --tf_xla_enable_xla_devices adds XLA_CPU (and XLA_GPU beside a GPU): no accelerator.
    has_accelerator = any(d.device_type != "CPU" and not d.device_type.startswith("XLA_") for d in physical)
    checks = _device_checks() if check_devices else ()
    get_jit = str(tf.config.optimizer.get_jit() or "")
    tf_xla_flags = os.environ.get("TF_XLA_FLAGS")
    env_auto_jit, env_cpu_global_jit = parse_tf_xla_flags(tf_xla_flags)
    tf_cpu_global_jit = _tf_cpu_global_jit()
    keras_version, keras_backend, keras_auto = _keras_facts(resolve_keras)
    in_strategy = bool(tf.distribute.has_strategy())
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    requested = bool(get_jit) or _auto_jit_requested(env_auto_jit)
    evidence = dataclasses.replace(
        evidence,
        autoclustering=requested,
        accelerator=has_accelerator,
        device="XLA_GPU_JIT" if has_accelerator else "XLA_CPU_JIT",
    )
    jit_fix = _fix_jit_compile(evidence)

    verdicts = _switch_verdicts(
        get_jit=get_jit,
        env_auto_jit=env_auto_jit,
        env_cpu_global_jit=env_cpu_global_jit,
        tf_cpu_global_jit=tf_cpu_global_jit,
        keras_backend=keras_backend,
        keras_auto_jit_compile=keras_auto,
        in_strategy=in_strategy,
        has_accelerator=has_accelerator,
        tf_xla_flags=tf_xla_flags,
        onednn_opts=onednn,
        jit_fix=jit_fix,
    )
    blocked = blocked_verdict(evidence)
    if blocked is not None:
        # Named before any advice to switch XLA on, which would fail.
        verdicts.insert(0, blocked)
    probe_result = None
    if probe:
        run = early_probe or start_probe(get_jit, tf_cpu_global_jit)
        probe_result = finish_probe(run, probe_timeout)
    cache_verdict, explained = _cache_verdict(persistent_cache(), checks, probe_result, tf_xla_flags)
    verdicts = _runtime_verdicts(checks, cache_verdict, explained) + verdicts
    if probe_result is not None:
        verdicts += _effectiveness_verdicts(
            probe_result,
            requested=requested,
            has_accelerator=has_accelerator,
            tf_cpu_global_jit=tf_cpu_global_jit,
            cache_verdict=cache_verdict,
            jit_fix=jit_fix,
        )
    elif requested and not has_accelerator and tf_cpu_global_jit is False:
        verdicts.append(_cpu_flag_missing("predicted from the switches, the probe was skipped"))
    return DoctorReport(
        python_version=platform.python_version(),
        tf_version=tf.__version__,
        keras_version=keras_version,
        keras_backend=keras_backend,
        physical_devices=tuple(f"{d.device_type}:{d.name}" for d in physical),
        device_checks=checks,
        get_jit=get_jit,
        tf_xla_flags=tf_xla_flags,
        env_auto_jit=env_auto_jit,
        env_cpu_global_jit=env_cpu_global_jit,
        tf_cpu_global_jit=tf_cpu_global_jit,
        keras_auto_jit_compile=keras_auto,
        in_distribution_strategy=in_strategy,
        onednn_opts=onednn,
        probe=probe_result,
        verdicts=tuple(verdicts),
        seconds=time.perf_counter() - started,
    )


def format_doctor_report(report: DoctorReport) -> str:
    """Formats a doctor report as text: facts per layer, then verdicts.

    A fix that an earlier verdict already showed is named, not repeated.

    Args:
        report: The report to format.

    Returns:
        Multi-line text, no trailing newline.
    """
    keras = (
        f"{report.keras_version} (backend {report.keras_backend})"
        if report.keras_version
        else "not installed"
    )
    flags = report.tf_xla_flags if report.tf_xla_flags is not None else "(unset)"
    onednn = report.onednn_opts if report.onednn_opts is not None else "(unset)"
    lines = [
        "keras-xla-guard doctor",
        "runtime:",
        f"  python {report.python_version}, tensorflow {report.tf_version}, keras {keras}",
        f"  physical devices: {', '.join(report.physical_devices) or '(none)'}",
    ]
    for check in report.device_checks:
        state = "compiles and runs" if check.xla_ok else f"FAILS ({check.error})"
        lines.append(f"  XLA on {check.device}: {state}")
    lines += [
        "switches:",
        f"  tf.config.optimizer.get_jit(): {report.get_jit or '(off)'}",
        f"  TF_XLA_FLAGS now: {flags}"
        f" (auto_jit={report.env_auto_jit}, cpu_global_jit={report.env_cpu_global_jit})",
        f"  tf_xla_cpu_global_jit as TensorFlow holds it: {report.tf_cpu_global_jit}",
        f"  Keras jit_compile='auto' resolves to: {report.keras_auto_jit_compile}"
        f"{' (distribution strategy active)' if report.in_distribution_strategy else ''}",
        f"  TF_ENABLE_ONEDNN_OPTS: {onednn}",
    ]
    probe = report.probe
    if probe is not None:
        lines.append("effectiveness (measured in a child process):")
        if probe.ran:
            lines.append(
                f"  probe: {probe.xla_time_fraction:.1%} of op time inside XLA, "
                f"{probe.xla_executions} XLA launches, {probe.compilations} compilations "
                f"({probe.seconds:.1f} s)"
            )
            if probe.plain_ops:
                lines.append(f"  plain TF ops: {', '.join(probe.plain_ops)}")
        else:
            lines.append(f"  probe failed: {probe.error}")
        if probe.log_lines:
            lines.append("  TensorFlow's XLA log lines:")
        else:
            level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")
            hidden = ""
            if level not in ("", "0"):
                hidden = f" (TF_CPP_MIN_LOG_LEVEL={level} hides its INFO lines)"
            lines.append(f"  TensorFlow logged nothing about XLA{hidden}.")
        lines += [f"    {line}" for line in probe.log_lines]
    lines.append("verdicts:")
    # Several verdicts can share one fix (XLA_NOT_REQUESTED and
    # JIT_COMPILE_AUTO_RESOLVES_FALSE on a CPU): the text shows it once.
    first_with_fix: dict[str, str] = {}
    for verdict in report.verdicts:
        earlier = first_with_fix.setdefault(verdict.fix, verdict.code) if verdict.fix else verdict.code
        if earlier == verdict.code:
            lines.append(f"  {verdict}")
        else:
            lines.append(f"  {dataclasses.replace(verdict, fix='')}")
            lines.append(f"    fix: the same as {earlier}'s above")
    return "\n".join(lines)
