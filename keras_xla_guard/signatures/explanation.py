"""`Explanation`: one finding about an epoch's input signatures, as data.

The tracker builds them; the console, TensorBoard and JSON each format them
once (`output.console`, `output.tensorboard_markdown`, `to_dict`). Pure Python.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUCKETING_FIX",
    "DIM_VARIED",
    "EXPLANATION_KINDS",
    "Explanation",
    "FIRST_SIGNATURE",
    "MORE_NEW_SIGNATURES",
    "NEW_SIGNATURE",
    "SHORT_LAST_BATCH",
    "STRUCTURE_CHANGED",
    "WARM_UP_MISSED",
]

STRUCTURE_CHANGED = "structure_changed"
DIM_VARIED = "dim_varied"
SHORT_LAST_BATCH = "short_last_batch"
FIRST_SIGNATURE = "first_signature"
NEW_SIGNATURE = "new_signature"
MORE_NEW_SIGNATURES = "more_new_signatures"
BUCKETING_FIX = "bucketing_fix"
WARM_UP_MISSED = "warm_up_missed"
EXPLANATION_KINDS = (
    STRUCTURE_CHANGED,
    DIM_VARIED,
    SHORT_LAST_BATCH,
    FIRST_SIGNATURE,
    NEW_SIGNATURE,
    MORE_NEW_SIGNATURES,
    BUCKETING_FIX,
    WARM_UP_MISSED,
)


@dataclass(frozen=True)
class Explanation:
    """One finding about an epoch's input signatures.

    Attributes:
        kind: What was found: `"structure_changed"`, `"dim_varied"`,
            `"short_last_batch"`, `"first_signature"`, `"new_signature"`,
            `"more_new_signatures"`, `"bucketing_fix"` or
            `"warm_up_missed"` (a new signature with the shapes of one
            `warm_up` compiled, but other dtypes or structure: the warm-up
            did not cover it).
        message: The finding in one line, with its numbers.
        severity: `"warning"` for a cause of extra compilations, `"info"`
            for context and the fix.
        input: The input's path in the batch (e.g. `"x['tokens']"`), when
            the finding is about one input.
        dim: The dimension concerned, when there is one.
        values: The finding's numbers: the values a dimension took
            (`dim_varied`), the last and the regular batch size
            (`short_last_batch`), the bucket boundaries (`bucketing_fix`).
        step: The step a new signature first appeared at, if known.
        fix_code: Python code that applies the fix; `""` for none.

    Example:

    ```python
    for finding in guard.signatures[0].explanations:
        print(finding)  # the one-line message
        if finding.kind == "bucketing_fix":
            print(finding.values, finding.fix_code)
    ```
    """

    kind: str
    message: str
    severity: str = "info"
    input: str | None = None
    dim: int | None = None
    values: tuple[int, ...] = ()
    step: int | None = None
    fix_code: str = ""

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """Returns the finding as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["values"] = list(self.values)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Explanation:
        """Rebuilds a finding from `to_dict()` output (e.g. read back from JSON).

        Args:
            data: A dict as `to_dict()` returns it.

        Returns:
            An equal `Explanation`.

        Raises:
            ValueError: If `data` is not such a dict.

        Example:

        ```python
        from keras_xla_guard import Explanation

        finding = Explanation("dim_varied", "x dim 1 took 3 values", values=(5, 7, 9))
        assert Explanation.from_dict(finding.to_dict()) == finding
        ```
        """
        try:
            return cls(**{**data, "values": tuple(data.get("values", ()))})
        except TypeError as e:
            raise ValueError(
                f"An explanation must be a dict from Explanation.to_dict() ({e}). Received: data={data!r}"
            ) from None
