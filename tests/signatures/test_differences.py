"""`differences` and `closest` on what keys a JAX program besides shapes: statics, weak types, keys, ranks.

Pure: signatures built by hand as `backend/jax_steps.py` builds them.
"""

from __future__ import annotations

import pickle

from keras_xla_guard.signatures.signature import Signature, closest, differences


def _sig(*leaves: tuple[str, tuple[int, ...], str], statics: tuple[tuple[str, str], ...] = ()) -> Signature:
    return Signature(
        tuple(p for p, _, _ in leaves),
        tuple(s for _, s, _ in leaves),
        tuple(d for _, _, d in leaves),
        statics,
    )


W = ("w", (8,), "float32")


def test_a_static_arguments_value_is_named_with_its_fix():
    a = _sig(W, statics=(("mode", "'a'"),))
    b = _sig(W, statics=(("mode", "'b'"),))
    assert differences(b, a) == [
        "static argument mode: 'a' -> 'b' (each value of a static argument compiles once; pass a value that "
        "varies as an array argument)"
    ]
    assert a != b and hash(a) != hash(b) and str(b) == "w: float32[8], mode='b'"


def test_a_new_function_object_names_the_first_one_it_replaces():
    """The first object of a code carries no tag, so the one before `object 2` is `object 1`."""
    first = _sig(W)
    second = _sig(W, statics=(("function", "step object 2"),))
    assert differences(second, first) == [
        "the step is a new function object (step object 1 -> step object 2): each new function object "
        "compiles anew; create the jitted step once, outside the loop"
    ]


def test_a_weak_type_change_says_which_kind_of_scalar():
    weak = _sig(W, ("lr", (), "weak float32"))
    typed = _sig(W, ("lr", (), "float32"))
    assert differences(typed, weak) == [
        "lr: dtype weak float32 -> float32 (weak type: a Python scalar is weakly typed, a NumPy or JAX "
        "scalar is not; pass the same kind every call)"
    ]
    assert differences(_sig(W, ("lr", (), "int32")), typed) == ["lr: dtype float32 -> int32"]


def test_keys_added_and_removed_and_a_rank_change_are_each_named():
    old = _sig(("p['a']", (3,), "float32"), ("p['c']", (2,), "float32"))
    new = _sig(("p['a']", (3, 1), "float32"), ("p['b']", (2,), "float32"))
    assert differences(new, old) == [
        "input(s) added to the structure: p['b']; input(s) removed from the structure: p['c'] (pass the "
        "same keys every call, e.g. create all state before the first step)",
        "p['a']: rank 1 -> 2 (float32[3] -> float32[3,1])",
    ]


def test_closest_prefers_the_signature_sharing_the_most_inputs():
    base = _sig(("p['a']", (3,), "float32"))
    other = _sig(("q", (3,), "int32"), ("r", (1,), "int32"))
    grown = _sig(("p['a']", (3,), "float32"), ("p['b']", (2,), "float32"))
    assert closest(grown, [base, other]) == base
    assert (
        closest(_sig(W, statics=(("mode", "'b'"),)), [_sig(W, statics=(("mode", "'a'"),)), base]) is not base
    )


def test_statics_survive_a_pickle_and_a_dict():
    sig = _sig(W, statics=(("mode", "'a'"),))
    assert pickle.loads(pickle.dumps(sig)) == sig
    assert sig.to_dict()["statics"] == [["mode", "'a'"]]
    assert "statics" not in _sig(W).to_dict()
