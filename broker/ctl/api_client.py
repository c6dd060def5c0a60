"""HTTP calls to a management API with the standard library (urllib), each failure
turned into a CtlFailure with rabbitmqctl's exit code and a hint."""

import base64
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from broker.ctl.failures import (NOT_PERMITTED, SOFTWARE, TIMEOUT, UNREACHABLE,
                                 CtlFailure)

MAX_ANSWER_BYTES = 256 * 1024 * 1024   # a definitions export of a large broker fits


class ApiAnswer(Exception):
    """An answer a verb may explain better (which object is missing, what was refused);
    command.main turns one a verb leaves alone into a data error naming the request."""

    def __init__(self, request: str, reason: str):
        super().__init__(reason)
        self.request = request
        self.reason = reason


class NotFound(ApiAnswer):
    """The API answered 404."""


class Refused(ApiAnswer):
    """The API answered 400 (or 405/409): `reason` is its explanation."""


def path_of(*segments: str) -> str:
    """/api/ followed by the segments, each quoted whole ("/" becomes %2F)."""
    return "/api/" + "/".join(urllib.parse.quote(segment, safe="") for segment in segments)


class ManagementClient:
    def __init__(self, url: str, username: str, password: str, timeout: float):
        self.url = url.rstrip("/")
        self.username = username
        self.timeout = timeout
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._authorization = f"Basic {token}"

    def get(self, path: str, query: dict | None = None):
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self.request("GET", path)

    def put(self, path: str, body) -> None:
        self.request("PUT", path, body)

    def post(self, path: str, body) -> None:
        self.request("POST", path, body)

    def delete(self, path: str, query: dict | None = None,
               headers: dict | None = None) -> None:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        self.request("DELETE", path, headers=headers)

    def request(self, method: str, path: str, body=None, headers: dict | None = None):
        """The decoded JSON answer (None when the body is empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", self._authorization)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            raise self._refusal(method, path, error) from None
        except (TimeoutError, socket.timeout):
            raise self._timed_out(method, path) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, (TimeoutError, socket.timeout)):
                raise self._timed_out(method, path) from None
            raise CtlFailure(UNREACHABLE, (
                f"could not reach the management API at {self.url}: {error.reason}. "
                "Check that the broker runs with its management listener and that --url "
                "(or WARREN_MANAGEMENT_URL) names it.")) from None
        except (ConnectionError, OSError) as error:
            raise CtlFailure(UNREACHABLE, (
                f"the connection to the management API at {self.url} failed: {error}. "
                "Check that the broker is running and reachable.")) from None
        if len(answer) > MAX_ANSWER_BYTES:
            raise CtlFailure(SOFTWARE, f"{method} {path} answered more than "
                                       f"{MAX_ANSWER_BYTES} bytes; use the HTTP API directly.")
        return json.loads(answer) if answer.strip() else None

    def _timed_out(self, method: str, path: str) -> CtlFailure:
        return CtlFailure(TIMEOUT, (
            f"{method} {path} at {self.url} got no answer within {self.timeout:g} s. "
            "The broker may be overloaded; retry with a larger --timeout."))

    def _refusal(self, method: str, path: str, error: urllib.error.HTTPError) -> Exception:
        reason = _reason_of(error)
        if error.code == 401:
            return CtlFailure(NOT_PERMITTED, (
                f"the management API at {self.url} refused user '{self.username}' "
                f"({reason}). Check --username and --password (or WARREN_MANAGEMENT_USER "
                "and WARREN_MANAGEMENT_PASSWORD); the user needs a management tag."))
        if error.code == 403:
            return CtlFailure(NOT_PERMITTED, (
                f"user '{self.username}' may not {method} {path} ({reason}). Use an "
                "administrator user or grant the user the needed tag and permissions."))
        if error.code == 404:
            return NotFound(f"{method} {path}", reason)
        if error.code in (400, 405, 409):
            return Refused(f"{method} {path}", reason)
        return CtlFailure(SOFTWARE, f"{method} {path} at {self.url} failed with HTTP "
                                    f"{error.code}: {reason}. See the broker's log.")


def _reason_of(error: urllib.error.HTTPError) -> str:
    """The `reason` of RabbitMQ's error body, or the HTTP status text."""
    try:
        body = json.loads(error.read(64 * 1024) or b"{}")
    except (ValueError, OSError):
        body = {}
    if isinstance(body, dict) and body.get("reason"):
        return str(body["reason"])
    return str(error.reason)
