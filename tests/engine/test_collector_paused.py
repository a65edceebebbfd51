"""Reading a long file pauses Python's cyclic garbage collector and always turns it back on."""

import gc

import pytest

from engine.validate.core import collector_paused


def test_paused_inside_and_back_on_after_an_error():
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        assert not gc.isenabled()
        raise ValueError("a damaged file")
    assert gc.isenabled()


def test_left_off_when_it_was_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
