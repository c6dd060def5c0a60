"""A queue file's index of live messages, kept compact for deep queues.

Where each live message's record is: seq -> (segment, offset, length, flags). A dict of
tuples cost about 150 bytes a message; here the locations are parallel arrays sorted by
seq (25 bytes a message), found by bisection. Seqs are appended in increasing order (a
queue's seqs only grow); compaction and recovery rewrite known ones in place. A removed
message leaves a hole (length 0: no record is empty) until the holes outnumber the live
messages, or the head of the arrays is all holes, which is what a draining queue does.
"""

from array import array
from bisect import bisect_left

_REMOVED = 0        # the length of a hole: every record has a header, so none is 0
_MIN_REBUILD = 1024     # fewer holes than this are never worth a rebuild


class SeqIndex:
    """seq -> (segment number, offset, length, flags) of each live message."""

    __slots__ = ("_seqs", "_segments", "_offsets", "_lengths", "_flags", "_start",
                 "_live")

    def __init__(self):
        self._seqs = array("q")
        self._segments = array("I")
        self._offsets = array("Q")
        self._lengths = array("I")
        self._flags = array("B")
        self._start = 0     # holes before this position only
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def __contains__(self, seq: int) -> bool:
        return self._position(seq) >= 0

    def get(self, seq: int) -> tuple[int, int, int, int] | None:
        position = self._position(seq)
        if position < 0:
            return None
        return (self._segments[position], self._offsets[position],
                self._lengths[position], self._flags[position])

    def __setitem__(self, seq: int, location: tuple[int, int, int, int]) -> None:
        number, offset, length, flags = location
        seqs = self._seqs
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
            self._segments.append(number)
            self._offsets.append(offset)
            self._lengths.append(length)
            self._flags.append(flags)
            self._live += 1
            return
        position = bisect_left(seqs, seq)
        if seqs[position] != seq:
            self._insert(position, seq, location)
            return
        if self._lengths[position] == _REMOVED:
            self._live += 1
            self._start = min(self._start, position)
        self._segments[position] = number
        self._offsets[position] = offset
        self._lengths[position] = length
        self._flags[position] = flags

    def __delitem__(self, seq: int) -> None:
        position = self._position(seq)
        if position < 0:
            raise KeyError(seq)
        self._lengths[position] = _REMOVED
        self._live -= 1
        lengths = self._lengths
        start = self._start
        end = len(lengths)
        while start < end and lengths[start] == _REMOVED:
            start += 1
        self._start = start
        holes = end - self._live
        if holes >= _MIN_REBUILD and holes > self._live:
            self._rebuild()

    def _position(self, seq: int) -> int:
        """Where the live message `seq` is in the arrays, or -1."""
        seqs = self._seqs
        start = self._start
        if start < len(seqs) and seqs[start] == seq:    # the head: a draining queue
            position = start
        else:
            position = bisect_left(seqs, seq, start)
            if position == len(seqs) or seqs[position] != seq:
                return -1
        return -1 if self._lengths[position] == _REMOVED else position

    def _insert(self, position: int, seq: int, location: tuple[int, int, int, int]) -> None:
        """A seq below the newest that the index never held (not done by a queue file,
        whose seqs grow, but correct all the same)."""
        number, offset, length, flags = location
        self._seqs.insert(position, seq)
        self._segments.insert(position, number)
        self._offsets.insert(position, offset)
        self._lengths.insert(position, length)
        self._flags.insert(position, flags)
        self._live += 1
        self._start = min(self._start, position)

    def _rebuild(self) -> None:
        """Drop the holes."""
        keep = [position for position, length in enumerate(self._lengths)
                if length != _REMOVED]
        for name in ("_seqs", "_segments", "_offsets", "_lengths", "_flags"):
            old = getattr(self, name)
            setattr(self, name, array(old.typecode, [old[position] for position in keep]))
        self._start = 0
