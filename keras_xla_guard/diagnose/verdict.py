"""The verdict vocabulary shared by `doctor`, `explain` and the strategy checks.

A `Verdict` is one finding with a stable code, the layer it belongs to, a
severity and the code that fixes it. Pure Python.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EFFECTIVENESS",
    "ERROR",
    "INFO",
    "MODEL",
    "OK",
    "RUNTIME",
    "SEVERITIES",
    "SWITCHES",
    "WARNING",
    "Verdict",
]

OK = "ok"
INFO = "info"
WARNING = "warning"
ERROR = "error"

RUNTIME = "runtime"
SWITCHES = "switches"
EFFECTIVENESS = "effectiveness"
MODEL = "model"
SEVERITIES = (OK, INFO, WARNING, ERROR)


@dataclass(frozen=True)
class Verdict:
    """One diagnosis with a stable code.

    Attributes:
        code: Stable identifier, e.g. `"AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING"`
            (listed in docs/diagnosis.md).
        layer: `"runtime"`, `"switches"`, `"effectiveness"` or `"model"`.
        status: `"ok"`, `"info"`, `"warning"` or `"error"`.
        message: What was found, in one or two sentences.
        fix: Code the user can paste; `""` when nothing needs fixing.
    """

    code: str
    layer: str
    status: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Returns the verdict as a JSON-serializable dict."""
        return dataclasses.asdict(self)

    def as_note(self) -> str:
        """Returns the verdict as one line: code, message and the fix's code lines."""
        code_lines = [line.strip() for line in self.fix.splitlines() if line.strip()]
        code_lines = [line for line in code_lines if not line.startswith("#")]
        fix = f" Fix: {'; '.join(code_lines)}" if code_lines else ""
        return f"{self.code}: {self.message}{fix}"

    def __str__(self) -> str:
        text = f"[{self.status.upper()}] {self.code}: {self.message}"
        if self.fix:
            text += "\n    fix:\n" + "\n".join(f"      {line}" for line in self.fix.splitlines())
        return text
