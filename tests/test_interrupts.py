"""InterruptGate with real signals the test process sends itself (os.kill)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from keras_xla_guard._interrupts import InterruptGate

# Each test pins what the gate does with Python's own SIGINT handler installed.
pytestmark = pytest.mark.usefixtures("python_sigint")


def _send(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    # Python runs the handler at the next bytecode boundary; give it several.
    for _ in range(100):
        time.sleep(0)


def test_gate_keeps_a_first_signal_until_check():
    """Before hold(), a SIGINT waits for the next check(), which raises KeyboardInterrupt."""
    reached = []
    with pytest.raises(KeyboardInterrupt), InterruptGate() as gate:
        _send()
        reached.append("after the signal")
        gate.check()
        reached.append("after check")
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_gate_passes_a_second_signal_on_at_once_before_hold():
    """A second SIGINT before check() raises at once (a hung step stays interruptible), and only once."""
    reached = []
    with pytest.raises(KeyboardInterrupt) as raised, InterruptGate() as gate:
        _send()
        reached.append("after the first")
        _send()
        reached.append("after the second")
        gate.check()
    assert reached == ["after the first"]
    assert raised.value.__context__ is None


def test_gate_holds_signals_after_hold_and_raises_once_when_the_block_ends():
    """After hold(), two SIGINTs wait: the block finishes, then one KeyboardInterrupt is raised."""
    done = []
    with pytest.raises(KeyboardInterrupt) as raised, InterruptGate() as gate:
        gate.hold()
        _send()
        _send()
        done.append(True)
    assert done == [True]
    assert raised.value.__context__ is None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _shielded(log: list[str]) -> None:
    for _ in range(2):
        os.kill(os.getpid(), signal.SIGINT)
        total = 0
        for i in range(100_000):  # the handler runs in this frame
            total += i
    log.append("shielded frame finished")


def test_gate_keeps_even_a_second_signal_that_lands_in_a_shielded_frame():
    """Two SIGINTs handled in a shielded function's own frame are both kept; check() raises once."""
    log: list[str] = []
    with pytest.raises(KeyboardInterrupt) as raised, InterruptGate(shield=[_shielded.__code__]) as gate:
        _shielded(log)
        log.append("after")
        gate.check()
        log.append("not reached")
    assert log == ["shielded frame finished", "after"]
    assert raised.value.__context__ is None


def test_gate_holds_sigterm_for_a_python_handler_and_delivers_it_after():
    """A Python SIGTERM handler is called once, after the held block, not during it."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with InterruptGate() as gate:
            gate.hold()
            _send(signal.SIGTERM)
            assert calls == []
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_gate_adds_no_second_keyboard_interrupt_to_one_already_leaving():
    """A SIGINT held while a KeyboardInterrupt leaves the block is not raised again."""
    with pytest.raises(KeyboardInterrupt) as raised, InterruptGate() as gate:
        try:
            raise KeyboardInterrupt("first")
        finally:
            gate.hold()
            _send()
    assert raised.value.args == ("first",)
    assert raised.value.__context__ is None


def test_gate_outside_the_main_thread_leaves_handlers_alone():
    """In another thread (where Python delivers no signal) the gate installs nothing."""
    seen = []

    def body() -> None:
        with InterruptGate() as gate:
            gate.hold()
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


def test_gate_leaves_an_ignored_sigint_ignored():
    """Under nohup (SIGINT ignored) the gate installs nothing: a SIGINT stays ignored, no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reached = []
    with InterruptGate() as gate:
        gate.hold()
        _send()
        reached.append("after the signal")
    gate.check()
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_gate_that_keeps_no_first_signal_passes_it_at_once():
    """keep_first=False: a SIGINT outside a shielded frame raises at once, as without a gate."""
    reached = []
    with pytest.raises(KeyboardInterrupt), InterruptGate(keep_first=False):
        _send()
        reached.append("after the signal")
    assert reached == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _shielded_once(log: list[str]) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    total = 0
    for i in range(100_000):  # the handler runs in this frame
        total += i
    log.append("shielded frame finished")


def test_a_gate_that_keeps_no_first_signal_still_keeps_one_in_a_shielded_frame_until_check():
    """keep_first=False with a shield (a wrapped fit's own frame): the signal waits for check()."""
    log: list[str] = []
    with (
        pytest.raises(KeyboardInterrupt),
        InterruptGate(shield=[_shielded_once.__code__], keep_first=False) as gate,
    ):
        _shielded_once(log)
        log.append("after")
        gate.check()
        log.append("not reached")
    assert log == ["shielded frame finished", "after"]


def test_held_raises_a_signal_once_the_function_returned():
    """held(f): a SIGINT inside f lets f finish, then raises once; the handler is Python's again."""
    from keras_xla_guard._interrupts import held

    done = []

    @held
    def stop_the_profiler() -> str:
        _send()
        _send()
        done.append("stopped")
        return "files"

    with pytest.raises(KeyboardInterrupt) as raised:
        stop_the_profiler()
    assert done == ["stopped"]
    assert raised.value.__context__ is None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_installed_inside_the_block_is_left_in_place():
    """The gate puts back only its own handler: one the block installed stays, and ours then forwards."""
    calls: list[int] = []
    with InterruptGate(keep_first=False) as gate:
        theirs = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
        assert theirs == gate._on_signal
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    _send()
    assert calls == [signal.SIGINT]
    # Theirs chains to ours, which forwards to Python's once the gate is closed.
    with pytest.raises(KeyboardInterrupt):
        theirs(signal.SIGINT, None)
