"""TensorFlow's verdict rules for `doctor`: facts in, `Verdict`s out.

`doctor.py` gathers the facts (devices, switches, the probe's measurement);
these functions turn them into the verdicts of docs/diagnosis.md, "Verdict
codes", each with its fix. Only the persistent-cache check touches
TensorFlow (it tries to write a file where TensorFlow would).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from keras_xla_guard.backend.xla_cache import PersistentCache, recommended_flags
from keras_xla_guard.diagnose.advice import JitEvidence, switch_fix
from keras_xla_guard.diagnose.keras_env import select_backend_fix
from keras_xla_guard.diagnose.probe import PROBE_MODULE, ProbeResult
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

if TYPE_CHECKING:
    from keras_xla_guard.diagnose.doctor import DeviceCheck

__all__ = [
    "CPU_FLAG",
    "auto_jit_requested",
    "cache_verdict",
    "cpu_flag_missing",
    "effectiveness_verdicts",
    "fix_jit_compile",
    "runtime_verdicts",
    "switch_verdicts",
]

CPU_FLAG = "--tf_xla_cpu_global_jit"

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


def fix_jit_compile(evidence: JitEvidence) -> str:
    """The fix of a finding that XLA is off: measured or hedged (`advice.switch_fix`)."""
    fix = switch_fix(evidence)
    if evidence.blockers or evidence.compare is not None:
        return fix
    return fix + "\n# for your own train step: @tf.function(jit_compile=True), measured the same way"


def auto_jit_requested(auto_jit: str | None) -> bool:
    """Whether a `--tf_xla_auto_jit` value (as `parse_tf_xla_flags` read it) asks for auto-clustering."""
    if auto_jit is None:
        return False
    # `single-gpu(N)` requests auto-clustering on one GPU only.
    if auto_jit.startswith("single-gpu"):
        return True
    return auto_jit.lstrip("-").isdigit() and int(auto_jit) > 0


def runtime_verdicts(
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


def cache_verdict(
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


def switch_verdicts(
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
    """The switches layer: what asks for XLA, what Keras resolves `"auto"` to, and flags that mislead."""
    verdicts = []
    requested = bool(get_jit) or auto_jit_requested(env_auto_jit)
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
                select_backend_fix("tensorflow"),
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


def cpu_flag_missing(evidence: str) -> Verdict:
    """`AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING`, with what showed it (`evidence`)."""
    return Verdict(
        "AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING",
        EFFECTIVENESS,
        ERROR,
        "Auto-clustering is requested but not effective on this CPU-only machine, "
        "because --tf_xla_cpu_global_jit was not in TF_XLA_FLAGS when TensorFlow read "
        f"its flags ({evidence}). TensorFlow prints nothing about this.",
        _FIX_CPU_FLAG,
    )


def effectiveness_verdicts(
    probe: ProbeResult,
    *,
    requested: bool,
    has_accelerator: bool,
    tf_cpu_global_jit: bool | None,
    cache_verdict: Verdict | None,
    jit_fix: str,
) -> list[Verdict]:
    """The effectiveness layer: what the probe measured, read against what was requested."""
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
        return [cpu_flag_missing(measured)]
    return [
        Verdict(
            "AUTOJIT_NOT_EFFECTIVE",
            EFFECTIVENESS,
            ERROR,
            f"Auto-clustering is requested but the probe did not run under XLA; {measured}.",
            jit_fix,
        )
    ]
