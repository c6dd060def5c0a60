"""Connection admission: the cap on sockets in the handshake, login refusal delays that
grow per address and are forgotten, and aggregate logging of refusals."""

import logging

from broker.server.admission import (FAILURE_MEMORY, LOGIN_DELAY_BASE, LOGIN_DELAY_MAX,
                                     Admission, default_connection_caps)


def _admission(cap: int = 2):
    now = [1000.0]
    return Admission(cap, lambda: now[0]), now


def test_sockets_in_the_handshake_are_capped_and_slots_come_back():
    admission, _ = _admission(cap=2)
    assert admission.admit() and admission.admit()
    assert not admission.admit()
    admission.handshake_ended()
    assert admission.admit()
    assert admission.refused_sockets == 1


def test_refusal_delay_doubles_per_failure_up_to_the_maximum_and_is_per_address():
    admission, _ = _admission()
    delays = [admission.login_refused("10.0.0.1") for _ in range(12)]
    assert delays[:3] == [LOGIN_DELAY_BASE, 2 * LOGIN_DELAY_BASE, 4 * LOGIN_DELAY_BASE]
    assert delays[-1] == LOGIN_DELAY_MAX
    assert delays == sorted(delays)
    assert admission.login_refused("10.0.0.2") == LOGIN_DELAY_BASE


def test_an_address_is_forgiven_after_a_quiet_period_or_a_successful_login():
    admission, now = _admission()
    for _ in range(5):
        admission.login_refused("10.0.0.1")
    now[0] += FAILURE_MEMORY + 1
    assert admission.login_refused("10.0.0.1") == LOGIN_DELAY_BASE
    admission.login_refused("10.0.0.1")
    admission.login_accepted("10.0.0.1")
    assert admission.login_refused("10.0.0.1") == LOGIN_DELAY_BASE


def test_refusals_are_logged_as_one_summary_line(caplog):
    admission, _ = _admission(cap=0)
    for _ in range(7):
        admission.login_refused("10.0.0.1")
    admission.login_refused("10.0.0.2")
    admission.admit()
    with caplog.at_level(logging.INFO, logger="warren.server"):
        admission.summarise()
        admission.summarise()     # nothing new: nothing logged
    lines = caplog.text.strip().splitlines()
    assert len(lines) == 2
    assert "event=logins_refused count=8 addresses=2 busiest=10.0.0.1 busiest_count=7" \
        in lines[0]
    assert "event=sockets_refused count=1" in lines[1]


def test_default_caps_leave_file_descriptors_for_the_broker_itself():
    """Open connections, sockets in the handshake and as many closing sockets (left for
    their clients to close) fit in the file limit with 256 descriptors to spare."""
    for limit in (1024, 1 << 20):
        connections, unauthenticated = default_connection_caps(limit)
        assert connections + 2 * unauthenticated <= limit - 256
        assert connections > unauthenticated > 0


def test_closing_sockets_are_capped_apart_from_handshakes():
    admission = Admission(2, clock=lambda: 0.0)
    assert admission.may_linger() and admission.may_linger()
    assert not admission.may_linger()   # the third is closed at once
    assert admission.admit()            # handshakes have their own count
    admission.linger_ended()
    assert admission.may_linger()
