"""Log in with pika and print the outcome as one JSON line: {"opened": true}, or
{"opened": false, "reply_code": ..., "reply_text": ...} when the broker refused with a
Connection.Close, or {"opened": false, "error": ...} otherwise.

    python login_probe.py HOST PORT USER PASSWORD

tests/integration/test_loopback_users.py runs it inside a network namespace, so that
the broker sees the login come from a non-loopback address.
"""

import ast
import json
import re
import sys

import pika
import pika.exceptions

TIMEOUT = 30   # seconds for the connection and each step of the handshake

# pika reports a Close received during the handshake only as the text of a
# ProbableAuthenticationError (or ProbableAccessDeniedError): the repr of its
# ConnectionClosedByBroker, "ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - ...'".
_CLOSED_BY_BROKER = re.compile(r"ConnectionClosedByBroker: \((\d+)\) (.*)$", re.DOTALL)


def probe(host: str, port: int, user: str, password: str) -> dict:
    parameters = pika.ConnectionParameters(
        host, port, credentials=pika.PlainCredentials(user, password),
        connection_attempts=1, heartbeat=0, socket_timeout=TIMEOUT,
        stack_timeout=TIMEOUT, blocked_connection_timeout=TIMEOUT)
    try:
        connection = pika.BlockingConnection(parameters)
    except (pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.ProbableAccessDeniedError) as error:
        closed = _CLOSED_BY_BROKER.match(str(error.args[0]))
        if closed is None:
            return {"opened": False, "error": repr(error)}
        return {"opened": False, "reply_code": int(closed.group(1)),
                "reply_text": ast.literal_eval(closed.group(2))}
    except pika.exceptions.AMQPError as error:
        return {"opened": False, "error": repr(error)}
    connection.close()
    return {"opened": True}


if __name__ == "__main__":
    host, port, user, password = sys.argv[1:5]
    print(json.dumps(probe(host, int(port), user, password)))
