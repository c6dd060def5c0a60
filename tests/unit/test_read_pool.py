"""The read pool: blocking reads run in worker threads, at most `workers` at once, and
their results come back on the event loop thread, each to its own callback."""

import logging
import threading

import trio

from broker.server.read_pool import ReadPool


def test_reads_run_off_the_loop_and_answer_on_it_a_few_at_a_time():
    pool = ReadPool(workers=2)
    loop_thread = threading.get_ident()
    running = 0
    most = 0
    lock = threading.Lock()
    gate = threading.Event()
    two_running = threading.Event()
    answers = []

    def read(number):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            if running == 2:
                two_running.set()
        gate.wait(10)
        with lock:
            running -= 1
        return number, threading.get_ident() != loop_thread

    async def main():
        finished = trio.Event()

        def done(result):
            answers.append((result, threading.get_ident() == loop_thread))
            if len(answers) == 6:
                finished.set()

        for number in range(6):
            pool.submit(lambda number=number: read(number), done)
        assert len(pool._waiting) == 4      # two reads started, the others wait their turn
        assert await trio.to_thread.run_sync(two_running.wait, 10)
        gate.set()
        with trio.fail_after(10):
            await finished.wait()

    trio.run(main)
    assert sorted(result for result, _on_loop in answers) == [(n, True) for n in range(6)]
    assert all(on_loop for _result, on_loop in answers)
    assert most == 2


def test_a_callback_that_raises_costs_only_its_read(caplog):
    pool = ReadPool(workers=1)
    answers = []

    def failing(result):
        raise RuntimeError("a bug in one queue's handling")

    async def main():
        finished = trio.Event()

        def done(result):
            answers.append(result)
            finished.set()

        pool.submit(lambda: "first", failing)
        pool.submit(lambda: "second", done)
        with trio.fail_after(10):
            await finished.wait()

    with caplog.at_level(logging.ERROR, "warren.storage"):
        trio.run(main)
    assert answers == ["second"]
    assert "event=read_failed" in caplog.text
