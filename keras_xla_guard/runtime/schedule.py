"""Which epochs and which steps of an epoch are profiled."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from keras_xla_guard._checks import check_int, is_int

__all__ = ["DEFAULT_MAX_STEPS", "DEFAULT_SKIP_STEPS", "ProfileSchedule"]

# The first steps of an epoch carry iterator start-up and, in the first
# epoch, tracing and XLA compilation: skipping them keeps the coverage figure
# about steady-state training (compilations are still counted in any epoch
# where they happen inside the window).
DEFAULT_SKIP_STEPS = 2
# Traces grow by roughly 10-50 KB per step for small models and much more for
# large ones; 20 steps are plenty for stable fractions and keep analysis fast.
DEFAULT_MAX_STEPS = 20


@dataclass(frozen=True)
class ProfileSchedule:
    """Decides which epochs to profile and which steps inside them.

    Args:
        profile_epochs: Epoch indices (0-based) to profile: an int, an
            iterable of ints or a `range`. `None` profiles no fixed epoch.
        profile_every: Also profile every N-th epoch (epochs 0, N, 2N, ...
            counted from the first epoch of the run). `None` disables it.
        skip_steps: Steps at the start of an epoch left out of the window.
            If an epoch is known to have no more steps than this, the
            window starts at step 0 instead.
        max_steps: Most steps profiled per window; `None` for the whole
            epoch (mind the trace size).

    Raises:
        ValueError: If an argument is not of the allowed form.
    """

    epochs: frozenset[int]
    every: int | None
    skip_steps: int
    max_steps: int | None

    @classmethod
    def create(
        cls,
        profile_epochs: int | Iterable[int] | None,
        profile_every: int | None,
        skip_steps: int = DEFAULT_SKIP_STEPS,
        max_steps: int | None = DEFAULT_MAX_STEPS,
    ) -> ProfileSchedule:
        """Validates user arguments and builds a schedule.

        Args:
            profile_epochs: See the class docstring.
            profile_every: See the class docstring.
            skip_steps: See the class docstring. Defaults to `2`.
            max_steps: See the class docstring. Defaults to `20`.

        Returns:
            The schedule.

        Raises:
            ValueError: If an argument is not of the allowed form.
        """
        epochs: set[int] = set()
        if profile_epochs is None:
            pass
        elif isinstance(profile_epochs, bool):
            raise ValueError(
                "`profile_epochs` must be an int, an iterable of ints or a range. "
                f"Received: profile_epochs={profile_epochs!r}"
            )
        elif isinstance(profile_epochs, int):
            epochs.add(check_int("profile_epochs", profile_epochs, minimum=0))
        elif isinstance(profile_epochs, (str, bytes)) or not isinstance(profile_epochs, Iterable):
            raise ValueError(
                "`profile_epochs` must be an int, an iterable of ints or a range. "
                f"Received: profile_epochs={profile_epochs!r}"
            )
        else:
            items = list(profile_epochs)
            for item in items:
                if not is_int(item) or item < 0:
                    raise ValueError(
                        "`profile_epochs` must hold non-negative epoch indices "
                        f"(0-based, as Keras counts). Received: profile_epochs={profile_epochs!r}"
                    )
            epochs.update(items)
        every = check_int("profile_every", profile_every, minimum=1, allow_none=True)
        skip = check_int("skip_steps", skip_steps, minimum=0)
        cap = check_int("max_steps", max_steps, minimum=1, allow_none=True)
        return cls(frozenset(epochs), every, skip, cap)

    def profiles_epoch(self, epoch: int, first_epoch: int = 0) -> bool:
        """Whether `epoch` gets a profiling window.

        Args:
            epoch: 0-based epoch index.
            first_epoch: The first epoch of the run (`initial_epoch`), from
                which `profile_every` counts. Defaults to `0`.

        Returns:
            `True` if the epoch is listed or falls on `profile_every`.
        """
        if epoch in self.epochs:
            return True
        return self.every is not None and (epoch - first_epoch) % self.every == 0

    def start_step(self, steps_in_epoch: int | None) -> int:
        """First step (0-based) of the window in an epoch.

        Args:
            steps_in_epoch: Steps the epoch will have, if known.

        Returns:
            `skip_steps`, or 0 when the epoch is known to be too short to
            skip that many steps and still profile one.
        """
        if steps_in_epoch is not None and steps_in_epoch <= self.skip_steps:
            return 0
        return self.skip_steps
