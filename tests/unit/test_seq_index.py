"""The queue file's compact index answers as the dict of locations it replaces, through
appends, rewrites, removals from the head and the middle, and the rebuilds they cause."""

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.seq_index import SeqIndex


def location(seq: int, segment: int = 1) -> tuple[int, int, int, int]:
    return (segment, seq * 100 + 2 ** 33, 40 + seq % 7, seq % 4)


def test_a_draining_queue_leaves_only_its_live_messages():
    index = SeqIndex()
    for seq in range(1, 5001):
        index[seq] = location(seq)
    for seq in range(1, 4001):
        del index[seq]
    assert len(index) == 1000
    assert index.get(4000) is None and 4000 not in index
    assert index.get(4001) == location(4001)
    assert all(index.get(seq) == location(seq) for seq in range(4001, 5001))


def test_a_rewritten_location_replaces_the_old_one():
    index = SeqIndex()
    for seq in range(1, 11):
        index[seq] = location(seq)
    index[3] = location(3, segment=9)
    assert index.get(3) == location(3, segment=9)
    assert len(index) == 10


def test_removing_an_unknown_seq_raises_key_error():
    index = SeqIndex()
    index[5] = location(5)
    del index[5]
    try:
        del index[5]
    except KeyError:
        return
    raise AssertionError("removing a removed seq must raise KeyError")


operations = st.lists(st.tuples(st.sampled_from(["append", "remove", "rewrite"]),
                                st.integers(min_value=0, max_value=10_000)),
                      max_size=3000)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_answers_as_a_dict_would(steps):
    index = SeqIndex()
    model: dict[int, tuple] = {}
    next_seq = 1
    for operation, pick in steps:
        if operation == "append":
            next_seq += 1 + pick % 3
            index[next_seq] = model[next_seq] = location(next_seq)
        elif model:
            seq = sorted(model)[pick % len(model)] if pick % 2 else min(model)
            if operation == "remove":
                del index[seq]
                del model[seq]
            else:
                index[seq] = model[seq] = location(seq, segment=2 + pick % 5)
    assert len(index) == len(model)
    for seq in range(1, next_seq + 1):
        assert index.get(seq) == model.get(seq)
        assert (seq in index) == (seq in model)


def test_holes_in_the_middle_are_dropped_without_losing_a_live_message():
    index = SeqIndex()
    for seq in range(1, 6001):
        index[seq] = location(seq)
    removed = [seq for seq in range(1, 6001) if seq % 3]
    for seq in removed:
        del index[seq]
    assert len(index) == 2000
    assert [seq for seq in range(1, 6001) if index.get(seq) == location(seq)] \
        == list(range(3, 6001, 3))
