"""JAX's persistent compilation cache: is it on, where, how full. Pure.

JAX reads its cache settings from `jax.config` (each also settable from
the environment in upper case before JAX is imported):
`jax_compilation_cache_dir` (on when set), and two thresholds that keep
programs out of it: `jax_persistent_cache_min_compile_time_secs` (default
1.0: a program compiled faster than that is never written, which on CPU is
most small models) and `jax_persistent_cache_min_entry_size_bytes`. Each
stored program is one file `<module>-<hash>-cache` (JAX 0.4.26+ keeps a
`-atime` file beside it). A later process loads the program instead of
compiling it; `jax.monitoring` then reports `/jax/compilation_cache/cache_hits`.

No JAX import: `doctor` reads the settings without JAX when it is not
loaded (the environment then), and from `jax.config` when it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras_xla_guard.backend.xla_cache import PersistentCache

__all__ = ["DEFAULT_MIN_COMPILE_TIME_S", "JaxPersistentCache", "jax_persistent_cache", "recommended_setting"]

# JAX's default for `jax_persistent_cache_min_compile_time_secs`.
DEFAULT_MIN_COMPILE_TIME_S = 1.0
_DIR = "jax_compilation_cache_dir"
_MIN_TIME = "jax_persistent_cache_min_compile_time_secs"


@dataclass(frozen=True)
class JaxPersistentCache(PersistentCache):
    """JAX's persistent compilation cache settings.

    Attributes:
        directory: Where compiled programs are stored.
        min_compile_time_s: Programs that compiled faster are not stored.
    """

    min_compile_time_s: float = DEFAULT_MIN_COMPILE_TIME_S

    def entries(self) -> int:
        """Programs stored in the cache directory now (0 when it does not exist)."""
        path = Path(self.directory)
        if not path.is_dir():
            return 0
        return sum(1 for p in path.iterdir() if p.name.endswith("-cache"))


def _float(value: Any, default: float) -> float:
    """`value` (a setting, of whatever type it was set with) as a float; `default` when float() refuses it."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def jax_persistent_cache(env: Mapping[str, str] | None = None) -> JaxPersistentCache | None:
    """JAX's persistent-cache settings: from `jax.config` when JAX is loaded, else the environment.

    Args:
        env: The environment to read when JAX is not loaded (or when given).
            Defaults to `None` (`jax.config` if loaded, else `os.environ`).

    Returns:
        The settings, or `None` when no cache directory is set.
    """
    jax = sys.modules.get("jax") if env is None else None
    config = getattr(jax, "config", None)
    if config is not None:
        directory = getattr(config, _DIR, None)
        min_time = getattr(config, _MIN_TIME, DEFAULT_MIN_COMPILE_TIME_S)
    else:
        source = env if env is not None else os.environ
        directory = source.get(_DIR.upper())
        min_time = source.get(_MIN_TIME.upper(), DEFAULT_MIN_COMPILE_TIME_S)
    if not directory:
        return None
    return JaxPersistentCache(
        directory=str(directory), min_compile_time_s=_float(min_time, DEFAULT_MIN_COMPILE_TIME_S)
    )


def recommended_setting(directory: str = "$HOME/.cache/jax") -> str:
    """The exact line that turns JAX's cache on for every program, small ones included.

    Args:
        directory: Where to keep compiled programs. Defaults to `"$HOME/.cache/jax"`.

    Returns:
        A shell line setting both environment variables before Python starts.
    """
    return f'export {_DIR.upper()}="{directory}" {_MIN_TIME.upper()}=0'
