"""In-process fuzzing of the frame decoder and the connection state machine.

Each hypothesis example draws one seed, and a `random.Random` with that seed makes every
decision of the grammar of tests/support/amqp_grammar.py and of the mutations of
tests/support/amqp_mutation.py, over the recorded seed sessions of tests/fuzz_seed_sessions/.
(A hypothesis draw costs about 0.25 ms and a session takes a few hundred decisions:
drawing each one spent nine tenths of the test's time in hypothesis.) Runs are
derandomized: the same code gives the same examples, so a failure in the suite
reproduces; its input is saved for `bench/fuzz_core.py --replay`. The long, random run
is bench/fuzz_core.py (docs/fuzzing.md).
"""

import hashlib
import logging
import tempfile
from pathlib import Path


from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from pamqp import commands

import amqp_codec.decoder as decoder_module
import broker.core.handshake as handshake_module
from amqp_codec import Decoder, ProtocolError, ProtocolHeaderMismatch
from broker.core.handshake import ConnectionState
from tests.support.amqp_grammar import (PROTOCOL_HEADER, RandomChoices, field_table, handshake_frames,
                                        session_frames)
from tests.support.amqp_mutation import fuzz_session, mutate_frame, read_cuts, split_frames
from core_fuzz_target import run_session
from tests.support.fuzz_seeds import SEED_DIR, load_seed_sessions

SEEDS = load_seed_sessions()
# No shrinking in the suite: it can take minutes on these inputs, and the failure
# message already names the bug (component, exception, traceback) and gives the input.
FUZZ_SETTINGS = settings(derandomize=True, database=None, deadline=None,
                         phases=(Phase.explicit, Phase.generate),
                         suppress_health_check=list(HealthCheck))


SEEDS_OF_CHOICES = st.integers(0, 2**64 - 1)


def _assert_no_failure(stream: bytes, cuts: list) -> None:
    failure = run_session(stream, cuts)
    if failure is None:
        return
    saved = Path(tempfile.gettempdir()) / \
        f"warren-fuzz-{hashlib.sha256(stream).hexdigest()[:12]}.bin"
    saved.write_bytes(stream)
    saved.with_suffix(".cuts").write_text(" ".join(map(str, cuts)) + "\n")
    raise AssertionError(f"{failure.signature}\n{failure.summary}\n{failure.detail}\n"
                         f"input saved: python3 bench/fuzz_core.py --replay {saved}")


def test_seed_sessions_are_recorded_from_every_client():
    names = {path.name.split("-")[0] for path in SEED_DIR.glob("*.bin")}
    assert {"pika", "java", "raw"} <= names
    for frames in SEEDS:
        assert frames[0] == PROTOCOL_HEADER and len(frames) > 4


def _pika_session() -> bytes:
    return (SEED_DIR / "pika-publish-consume-0.bin").read_bytes()


def test_the_target_reports_an_exception_from_the_core(monkeypatch):
    """The property is not vacuous: an exception in a core handler is a failure."""
    def broken_open(handshake, method):
        raise RuntimeError("boom")

    monkeypatch.setitem(handshake_module._STEPS,
                        (ConnectionState.OPENING, commands.Connection.Open), broken_open)
    failure = run_session(_pika_session(), [100])
    # Raised out of the core, or caught by a safety net that logged it.
    assert failure.component in ("core", "logged")
    assert failure.summary == "RuntimeError: boom"
    assert failure.signature.endswith("in broken_open")   # where it was raised


def test_the_target_reports_an_exception_from_the_decoder(monkeypatch):
    def broken_start_ok():   # the decoder's method class for Connection.StartOk
        raise RuntimeError("boom")

    monkeypatch.setitem(decoder_module._METHOD_CLASSES, commands.Connection.StartOk.index,
                        broken_start_ok)
    failure = run_session(_pika_session(), [])
    assert failure.component == "decoder" and failure.summary == "RuntimeError: boom"


def test_the_target_reports_an_error_the_safety_net_logged(monkeypatch):
    """A broker that catches the exception, logs it and closes with 541 still fails."""
    def failing_open(handshake, method):
        try:
            raise RuntimeError("boom")
        except RuntimeError as error:
            logging.getLogger("warren.connection").error("event=internal_error",
                                                         exc_info=error)
        handshake.connection.close(541, "INTERNAL_ERROR - caught by the safety net")

    monkeypatch.setitem(handshake_module._STEPS,
                        (ConnectionState.OPENING, commands.Connection.Open), failing_open)
    failure = run_session(_pika_session(), [])
    assert failure.component == "logged" and failure.summary == "RuntimeError: boom"


def test_a_recorded_session_runs_cleanly_whatever_the_reads():
    stream = _pika_session()
    for cuts in ([], [1], [3, 8, 9], list(range(0, len(stream), 7))):
        _assert_no_failure(stream, cuts)


@settings(FUZZ_SETTINGS, max_examples=300)
@given(SEEDS_OF_CHOICES)
def test_decoder_raises_only_protocol_errors(seed):
    """Any bytes in any split: complete commands or ProtocolError/HeaderMismatch."""
    choices = RandomChoices.seeded(seed)
    frames, _ = fuzz_session(choices, SEEDS)
    stream = b"".join(frames)
    decoder = Decoder(frame_max=choices.choice((0, 4096, 131072)))
    previous = 0
    for cut in read_cuts(choices, stream) + [len(stream)]:
        try:
            decoder.feed(stream[previous:cut])
        except (ProtocolError, ProtocolHeaderMismatch):
            return
        previous = max(previous, cut)


@settings(FUZZ_SETTINGS, max_examples=800)
@given(SEEDS_OF_CHOICES)
def test_mutated_sessions_never_break_the_broker(seed):
    """A seed or grammar session, mutated, read in random pieces: the decoder raises
    only protocol errors, the core never raises or logs an error, its output is well
    formed, and the next client on the same broker is served."""
    choices = RandomChoices.seeded(seed)
    frames, _ = fuzz_session(choices, SEEDS)
    stream = b"".join(frames)
    _assert_no_failure(stream, read_cuts(choices, stream))


@settings(FUZZ_SETTINGS, max_examples=300)
@given(SEEDS_OF_CHOICES)
def test_hostile_frames_after_a_valid_handshake_never_break_the_broker(seed):
    """pika's handshake and channel open, then a grammar session's operations with about
    one frame in five mutated (the others keep the connection going past channel
    errors)."""
    choices = RandomChoices.seeded(seed)
    handshake = split_frames(_pika_session())[:5]
    operations = [mutate_frame(choices, frame) if choices.chance(20) else frame
                  for frame in session_frames(choices)[5:]]
    stream = b"".join(handshake + operations)
    _assert_no_failure(stream, read_cuts(choices, stream))


@settings(FUZZ_SETTINGS, max_examples=200)
@given(SEEDS_OF_CHOICES)
def test_start_ok_client_properties_of_any_shape_never_break_the_broker(seed):
    """Before login: Start-Ok's client properties table of every type tag, unknown
    tags, truncation and nesting thousands deep."""
    choices = RandomChoices.seeded(seed)
    properties = field_table(choices, 0, ("capabilities", "product"))
    handshake = handshake_frames(choices, properties)
    _assert_no_failure(b"".join([PROTOCOL_HEADER, *handshake]), [])
