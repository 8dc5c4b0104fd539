"""TensorFlow's XLA persistent compilation cache: is it on, where, how full.

TensorFlow 2.21 reads four flags from `TF_XLA_FLAGS` once, at import
(`tensorflow/compiler/jit/flags.cc`): `--tf_xla_persistent_cache_directory`
(on when non-empty), `--tf_xla_persistent_cache_device_types` (only these
devices, comma separated; all when empty), `--tf_xla_persistent_cache_read_only`
and `--tf_xla_persistent_cache_prefix` (file name prefix, default
`xla_compile_cache`). Each compiled program is one file
`<prefix>__<key>__<hash>__<DEVICE>.pb`; a later process with the same flags
loads it instead of compiling. Pure: no TensorFlow import, so `doctor` and
the tests read the flags without TensorFlow.

The flags are TensorFlow's, so they live in the backend room: the TensorFlow
backend's `persistent_cache()` returns what this module reads, and the
engine only asks its backend. `PersistentCache` is what every backend
returns; `entries()` counts TensorFlow's file names.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_PREFIX", "PersistentCache", "persistent_cache", "recommended_flags"]

DEFAULT_PREFIX = "xla_compile_cache"
_FLAG = "--tf_xla_persistent_cache_"


@dataclass(frozen=True)
class PersistentCache:
    """The persistent-cache flags found in `TF_XLA_FLAGS`.

    Attributes:
        directory: Where compiled programs are stored.
        device_types: Devices the cache serves (empty: all).
        read_only: Whether new programs are not written.
        prefix: File name prefix.
    """

    directory: str
    device_types: tuple[str, ...] = ()
    read_only: bool = False
    prefix: str = DEFAULT_PREFIX

    def entries(self) -> int:
        """Programs stored in the cache directory now (0 when it does not exist)."""
        path = Path(self.directory)
        if not path.is_dir():
            return 0
        return sum(1 for p in path.iterdir() if p.name.startswith(self.prefix + "__") and p.suffix == ".pb")


def _parse_bool(value: str) -> bool:
    return value.strip().lower() in ("", "1", "true", "yes")


def persistent_cache(env: Mapping[str, str] | None = None) -> PersistentCache | None:
    """Reads the persistent-cache flags from `TF_XLA_FLAGS`.

    Args:
        env: The environment to read. Defaults to `None` (`os.environ`).
            TensorFlow reads the flags once, when it is imported: a change
            after that has no effect on this process.

    Returns:
        The cache settings, or `None` when no directory is set.
    """
    flags = (env if env is not None else os.environ).get("TF_XLA_FLAGS", "")
    values: dict[str, str] = {}
    for token in shlex.split(flags):
        if not token.startswith(_FLAG):
            continue
        name, _, value = token[len(_FLAG) :].partition("=")
        values[name] = value if "=" in token else "true"
    directory = values.get("directory", "")
    if not directory:
        return None
    devices = tuple(d for d in values.get("device_types", "").split(",") if d)
    return PersistentCache(
        directory=directory,
        device_types=devices,
        read_only=_parse_bool(values["read_only"]) if "read_only" in values else False,
        prefix=values.get("prefix") or DEFAULT_PREFIX,
    )


def recommended_flags(directory: str = "$HOME/.cache/xla", env: Mapping[str, str] | None = None) -> str:
    """The exact line that turns the cache on, keeping the other `TF_XLA_FLAGS`.

    Args:
        directory: Where to keep compiled programs. Defaults to
            `"$HOME/.cache/xla"` (the shell expands it; TensorFlow does not expand `~`).
        env: The environment whose `TF_XLA_FLAGS` to keep. Defaults to
            `None` (`os.environ`).

    Returns:
        A shell line, e.g.
        `export TF_XLA_FLAGS="--tf_xla_persistent_cache_directory=$HOME/.cache/xla"`.
    """
    flags = (env if env is not None else os.environ).get("TF_XLA_FLAGS", "")
    kept = [t for t in shlex.split(flags) if not t.startswith(_FLAG + "directory")]
    kept.append(f"{_FLAG}directory={directory}")
    return f'export TF_XLA_FLAGS="{" ".join(kept)}"'
