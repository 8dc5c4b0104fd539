"""`doctor` for Keras on JAX: which backend, is jit on, which JAX settings shape compilation.

Under JAX there are no XLA switches to get wrong the way TensorFlow has
them: every Keras step is one `jax.jit` program unless jit is turned off.
What decides a run's compile cost is JAX's own settings: whether jit is
disabled, the persistent compilation cache (and its 1 s threshold, which
keeps most CPU programs out of it), and the flags that explain or log
compilations. This module gathers those facts and verdicts without
TensorFlow; `keras-xla-guard doctor` uses it when Keras runs on JAX.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.diagnose.keras_env import KerasFacts, backend_unavailable_verdict, keras_facts
from keras_xla_guard.diagnose.verdict import ERROR, INFO, OK, RUNTIME, SWITCHES, WARNING, Verdict

__all__ = ["JaxDoctorReport", "doctor_jax", "format_jax_doctor_report"]


@dataclass(frozen=True)
class JaxDoctorReport:
    """Facts and verdicts about compilation under JAX in this process.

    Attributes:
        python_version: `platform.python_version()`.
        jax_version: `jax.__version__`.
        jaxlib_version: `jaxlib.__version__`.
        keras_version: `keras.__version__`, or `None` if Keras is missing.
        keras_backend: Keras' backend name, or `None`.
        default_backend: `jax.default_backend()` (`"cpu"`, `"gpu"`, ...).
        devices: `str()` of each of `jax.devices()`.
        device_checks: `(device, None or the error)` of a tiny `jax.jit`
            compiled and run on each device.
        jit_disabled: `jax.config.jax_disable_jit`.
        cache_dir: `jax_compilation_cache_dir`, `None` when unset.
        cache_min_compile_time_s: `jax_persistent_cache_min_compile_time_secs`.
        cache_entries: Programs stored in the cache directory now.
        log_compiles: `jax_log_compiles`.
        explain_cache_misses: `jax_explain_cache_misses`, `None` on a JAX
            without it.
        xla_flags: `XLA_FLAGS` in the environment (`None` if unset).
        verdicts: All verdicts.
        seconds: Time the doctor took.
    """

    python_version: str
    jax_version: str
    jaxlib_version: str
    keras_version: str | None
    keras_backend: str | None
    default_backend: str
    devices: tuple[str, ...]
    device_checks: tuple[tuple[str, str | None], ...]
    jit_disabled: bool
    cache_dir: str | None
    cache_min_compile_time_s: float | None
    cache_entries: int
    log_compiles: bool
    explain_cache_misses: bool | None
    xla_flags: str | None
    verdicts: tuple[Verdict, ...]
    seconds: float = 0.0

    @property
    def problems(self) -> tuple[Verdict, ...]:
        """The verdicts with status `"warning"` or `"error"`."""
        return tuple(v for v in self.verdicts if v.status in (WARNING, ERROR))

    @property
    def codes(self) -> tuple[str, ...]:
        """The verdict codes, in report order."""
        return tuple(v.code for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serializable dict (with `"backend": "jax"`)."""
        d = dataclasses.asdict(self)
        d["devices"] = list(self.devices)
        d["device_checks"] = [{"device": dev, "error": err} for dev, err in self.device_checks]
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        d["backend"] = "jax"
        return d

    def __str__(self) -> str:
        return format_jax_doctor_report(self)


def _device_checks(jax: Any) -> tuple[tuple[str, str | None], ...]:
    checks = []
    for device in jax.devices():
        try:
            value = jax.jit(lambda x: x * 2 + 1)(jax.device_put(jax.numpy.ones(2), device))
            ok = float(value[0]) == 3.0
            checks.append((str(device), None if ok else "computed a wrong value"))
        except Exception as e:  # noqa: BLE001 - the check reports it
            checks.append((str(device), f"{type(e).__name__}: {e}"))
    return tuple(checks)


def _verdicts(report: JaxDoctorReport, keras: KerasFacts) -> list[Verdict]:
    from keras_xla_guard.backend.jax_cache import recommended_setting

    found = []
    for device, error in report.device_checks:
        if error is None:
            found.append(
                Verdict("XLA_BACKEND_OK", RUNTIME, OK, f"a jax.jit program compiles and runs on {device}.")
            )
        else:
            found.append(
                Verdict("XLA_BACKEND_BROKEN", RUNTIME, ERROR, f"a jax.jit program fails on {device}: {error}")
            )
    unavailable = backend_unavailable_verdict(keras, "jax")
    if unavailable is not None:
        found.append(unavailable)
    elif report.keras_backend is not None and report.keras_backend != "jax":
        found.append(
            Verdict(
                "KERAS_NOT_ON_JAX",
                SWITCHES,
                INFO,
                f"Keras runs on backend={report.keras_backend!r} ({keras.source}); these are JAX's facts, "
                "which Keras uses only with KERAS_BACKEND=jax.",
            )
        )
    if report.jit_disabled:
        found.append(
            Verdict(
                "JAX_JIT_DISABLED",
                SWITCHES,
                ERROR,
                "jax_disable_jit is on: every Keras step runs op by op, uncompiled.",
                fix='jax.config.update("jax_disable_jit", False)  # or unset JAX_DISABLE_JIT',
            )
        )
    else:
        found.append(
            Verdict(
                "JAX_JIT_ON",
                SWITCHES,
                OK,
                "jit is on: each Keras step (train, test, predict) is one XLA program.",
            )
        )
    if report.cache_dir is None:
        found.append(
            Verdict(
                "JAX_CACHE_OFF",
                SWITCHES,
                INFO,
                "JAX's persistent compilation cache is off: every process compiles its programs again.",
                fix=f"{recommended_setting()}  # before starting Python",
            )
        )
    elif report.cache_min_compile_time_s:
        found.append(
            Verdict(
                "JAX_CACHE_THRESHOLD",
                SWITCHES,
                WARNING,
                f"JAX's persistent cache ({report.cache_dir}, {report.cache_entries} program(s)) stores only "
                f"programs that compiled for at least {report.cache_min_compile_time_s:g} s; faster ones "
                "(most programs on CPU) compile again in every process.",
                fix=f"{recommended_setting(report.cache_dir)}  # before starting Python",
            )
        )
    else:
        found.append(
            Verdict(
                "JAX_CACHE_ON",
                SWITCHES,
                OK,
                f"JAX's persistent cache ({report.cache_dir}) holds {report.cache_entries} program(s) and stores "
                "every new one.",
            )
        )
    return found


def doctor_jax(check_devices: bool = True) -> JaxDoctorReport:
    """Diagnoses compilation under JAX in this process (imports JAX; Keras only in a child process).

    Args:
        check_devices: Compile and run a tiny `jax.jit` program on every
            device. Defaults to `True`.

    Returns:
        A `JaxDoctorReport`.

    Example:

    ```python
    from keras_xla_guard.diagnose.doctor_jax import doctor_jax
    print(doctor_jax())
    ```
    """
    started = time.perf_counter()
    import jax
    import jaxlib

    from keras_xla_guard.backend.jax_cache import jax_persistent_cache

    # Keras is not imported here unless it already is: importing it would
    # start its configured backend and could write ~/.keras/keras.json.
    keras = keras_facts()
    cache = jax_persistent_cache()
    report = JaxDoctorReport(
        python_version=platform.python_version(),
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        keras_version=keras.version,
        keras_backend=keras.backend,
        default_backend=jax.default_backend(),
        devices=tuple(str(d) for d in jax.devices()),
        device_checks=_device_checks(jax) if check_devices else (),
        jit_disabled=bool(jax.config.jax_disable_jit),
        cache_dir=cache.directory if cache is not None else None,
        cache_min_compile_time_s=cache.min_compile_time_s if cache is not None else None,
        cache_entries=cache.entries() if cache is not None else 0,
        log_compiles=bool(jax.config.jax_log_compiles),
        explain_cache_misses=getattr(jax.config, "jax_explain_cache_misses", None),
        xla_flags=os.environ.get("XLA_FLAGS"),
        verdicts=(),
    )
    return dataclasses.replace(
        report, verdicts=tuple(_verdicts(report, keras)), seconds=time.perf_counter() - started
    )


def format_jax_doctor_report(report: JaxDoctorReport) -> str:
    """Formats a JAX doctor report as text: facts, then verdicts.

    Args:
        report: The report to format.

    Returns:
        Multi-line text, no trailing newline.
    """
    fails = ": cannot start here" if "KERAS_BACKEND_UNAVAILABLE" in report.codes else ""
    keras = (
        f"{report.keras_version} (backend {report.keras_backend}{fails})"
        if report.keras_version
        else "not installed"
    )
    cache = (
        "(off)"
        if report.cache_dir is None
        else (
            f"{report.cache_dir} ({report.cache_entries} program(s); stores programs compiled for "
            f">= {report.cache_min_compile_time_s:g} s)"
        )
    )
    explain = "(not in this JAX)" if report.explain_cache_misses is None else str(report.explain_cache_misses)
    lines = [
        "keras-xla-guard doctor (JAX)",
        "runtime:",
        f"  python {report.python_version}, jax {report.jax_version} (jaxlib {report.jaxlib_version}), keras {keras}",
        f"  default backend: {report.default_backend}; devices: {', '.join(report.devices) or '(none)'}",
    ]
    for device, error in report.device_checks:
        lines.append(f"  jax.jit on {device}: {'compiles and runs' if error is None else f'FAILS ({error})'}")
    lines += [
        "switches:",
        f"  jit: {'DISABLED (jax_disable_jit)' if report.jit_disabled else 'on'}",
        f"  persistent compilation cache: {cache}",
        f"  jax_log_compiles: {report.log_compiles}; jax_explain_cache_misses: {explain}",
        f"  XLA_FLAGS: {report.xla_flags if report.xla_flags is not None else '(unset)'}",
        "verdicts:",
    ]
    lines += [f"  {line}" for verdict in report.verdicts for line in str(verdict).splitlines()]
    lines.append(
        "note: under JAX every Keras step is one XLA program; coverage is not the question, "
        "compilations are (the guard counts them per function: docs/jax.md)."
    )
    return "\n".join(lines)
