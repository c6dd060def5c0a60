"""Erlang's erlang:phash2 (erts' make_hash2, Bob Jenkins' mix), for the few term kinds
a binding's arguments and a message's routing keys become in RabbitMQ: lists, tuples,
binaries, atoms, integers, floats. The management API names a binding with arguments by
this hash of them (broker/server/management/binding_keys.py), and an x-modulus-hash
exchange picks a destination by the hash of a message's routing keys
(hash_exchanges.py): matching RabbitMQ's values lets tools find bindings and sends each
message to the queue RabbitMQ would.

Terms are written as Python values: list, tuple, bytes (binary), Atom, int, float;
True/False are the atoms true/false. Checked against Erlang/OTP 25's own values
(tests/unit/test_binding_keys.py)."""

import struct

_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9       # erts' HCONST
_EMPTY_LIST = 3468870702   # make_hash2([])
_NIL_AFTER = 2             # what a list's end adds after other terms
_SMALL = 1 << 27           # integers outside ±2^27 hash as bignums


class Atom(str):
    """An Erlang atom (as opposed to a binary, which is bytes)."""


def phash2(term) -> int:
    """erlang:phash2(Term, 1 bsl 32)."""
    hash = 0
    pending = [term]
    while pending:
        term = pending.pop()
        if isinstance(term, _ListRest):
            hash = _list(hash, term.items, term.index, pending)
        elif isinstance(term, list):
            hash = _list(hash, term, 0, pending)
        elif isinstance(term, tuple):
            hash = _mixed(hash, len(term), 0, _constant(9))
            pending.extend(reversed(term))
        elif isinstance(term, Atom):
            value = _atom_hash(term)
            hash = value if hash == 0 else _mixed(hash, value, 0, _constant(3))
        elif isinstance(term, bool):
            pending.append(Atom("true" if term else "false"))
        elif isinstance(term, int):
            hash = _integer(hash, term)
        elif isinstance(term, float):
            low, high = struct.unpack("<II", struct.pack("<d", term or 0.0))
            hash = _mixed(hash, high, low, _constant(12))
        elif isinstance(term, bytes):
            initial = (_constant(13) + hash) & _MASK
            hash = _block_hash(term, initial) if term else initial
        else:
            raise TypeError(f"no Erlang term for {term!r}")
    return hash


class _ListRest:
    """The part of a list still to hash, from `index` on."""

    def __init__(self, items: list, index: int):
        self.items = items
        self.index = index


def _list(hash: int, items: list, index: int, pending: list) -> int:
    """Hash a run of bytes (Erlang's string case) 4 at a time; then the next element,
    leaving the rest for later, or the list's end."""
    run, count = 0, 0
    while index < len(items) and _is_byte(items[index]):
        run = ((run << 8) + items[index]) & _MASK
        if count == 3:
            hash = _mixed(hash, run, 0, _constant(4))
            run, count = 0, 0
        else:
            count += 1
        index += 1
    if count:
        hash = _mixed(hash, run, 0, _constant(4))
    if index < len(items):
        pending.append(_ListRest(items, index + 1))
        pending.append(items[index])
        return hash
    return _EMPTY_LIST if hash == 0 else _mixed(hash, _NIL_AFTER, 0, _constant(2))


def _is_byte(value) -> bool:
    return type(value) is int and 0 <= value < 256


def _integer(hash: int, value: int) -> int:
    if -_SMALL <= value < _SMALL:
        if value < 0:   # erts mixes negative numbers twice
            hash = _mixed(hash, -value, 0, _GOLDEN)
        return _mixed(hash, value & _MASK, 0, _GOLDEN)
    constant = _constant(10) if value < 0 else _constant(11)
    magnitude = abs(value)
    while True:
        digit = magnitude & 0xFFFFFFFFFFFFFFFF
        hash = _mixed(hash, digit & _MASK, digit >> 32, constant)
        magnitude >>= 64
        if not magnitude:
            return hash


def _atom_hash(name: str) -> int:
    """hashpjw of the atom's text, as erts keeps it in the atom table."""
    hash = 0
    for byte in name.encode("latin-1"):
        hash = ((hash << 4) + byte) & _MASK
        top = hash & 0xF0000000
        if top:
            hash ^= top >> 24
            hash ^= top
    return hash


def _block_hash(data: bytes, initial: int) -> int:
    a = b = _GOLDEN
    c = initial
    offset = 0
    while len(data) - offset >= 12:
        a = (a + int.from_bytes(data[offset:offset + 4], "little")) & _MASK
        b = (b + int.from_bytes(data[offset + 4:offset + 8], "little")) & _MASK
        c = (c + int.from_bytes(data[offset + 8:offset + 12], "little")) & _MASK
        a, b, c = _mix(a, b, c)
        offset += 12
    tail = data[offset:] + bytes(12 - (len(data) - offset))
    c = (c + len(data) + (int.from_bytes(tail[8:12], "little") << 8)) & _MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & _MASK
    a = (a + int.from_bytes(tail[0:4], "little")) & _MASK
    return _mix(a, b, c)[2]


def _constant(multiple: int) -> int:
    return (_GOLDEN * multiple) & _MASK


def _mixed(hash: int, first: int, second: int, constant: int) -> int:
    return _mix((constant + first) & _MASK, (constant + second) & _MASK, hash)[2]


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - b - c) & _MASK ^ (c >> 13)
    b = (b - c - a) & _MASK ^ ((a << 8) & _MASK)
    c = (c - a - b) & _MASK ^ (b >> 13)
    a = (a - b - c) & _MASK ^ (c >> 12)
    b = (b - c - a) & _MASK ^ ((a << 16) & _MASK)
    c = (c - a - b) & _MASK ^ (b >> 5)
    a = (a - b - c) & _MASK ^ (c >> 3)
    b = (b - c - a) & _MASK ^ ((a << 10) & _MASK)
    c = (c - a - b) & _MASK ^ (b >> 15)
    return a, b, c
