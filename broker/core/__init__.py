"""The broker's semantics: pure, synchronous Python with no I/O and no trio.

The server layer feeds decoded commands in and receives encoded bytes through a
`Transport` (see ports.py, which declares everything the core needs from outside).
"""
