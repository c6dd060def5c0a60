"""The source holds Python's cyclic garbage collector off only while it works: whatever
happens inside, the collector is as the user left it afterwards."""

import gc
import threading

import pytest

from spark.amqp.gc_pause import cyclic_gc_paused


@pytest.fixture(autouse=True)
def collector_restored():
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after():
    gc.enable()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_leaves_the_collector_on():
    gc.enable()
    with pytest.raises(RuntimeError):
        with cyclic_gc_paused():
            raise RuntimeError("read failed")
    assert gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled():
    gc.disable()
    with cyclic_gc_paused():
        pass
    assert not gc.isenabled()


def test_nested_pauses_end_with_the_outermost():
    gc.enable()
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_in_two_threads_end_with_the_last():
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other_reader():
        with cyclic_gc_paused():
            inside.set()
            release.wait()

    thread = threading.Thread(target=other_reader)
    with cyclic_gc_paused():
        thread.start()
        inside.wait()
    assert not gc.isenabled()  # the other thread's pause is still under way
    release.set()
    thread.join()
    assert gc.isenabled()
