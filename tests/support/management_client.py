"""A small client of a broker's management HTTP API for the tests (httpx), the same for
Warren and for RabbitMQ with its management plugin."""

import time
import urllib.parse

import httpx

STATS_TIMEOUT = 30.0   # seconds RabbitMQ may take to show a change in its statistics


class ManagementApi:
    """Requests as `user` to the API at `base_url`; every method returns the
    httpx.Response (the tests check status codes themselves)."""

    def __init__(self, base_url: str, user: str = "guest", password: str = "guest"):
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.password = password
        # A new connection per request: RabbitMQ's web server may close a kept-alive
        # connection after an error answer, and a request sent on it meanwhile then
        # fails with "Server disconnected without sending a response" (a race).
        self.http = httpx.Client(base_url=self.base_url, auth=(user, password),
                                 timeout=60.0,
                                 limits=httpx.Limits(max_keepalive_connections=0))

    def as_user(self, user: str, password: str) -> "ManagementApi":
        return ManagementApi(self.base_url, user, password)

    def get(self, path: str, **params) -> httpx.Response:
        return self.http.get(path, params=params or None)

    def put(self, path: str, body=None) -> httpx.Response:
        return self.http.put(path, json=body if body is not None else {})

    def post(self, path: str, body=None) -> httpx.Response:
        return self.http.post(path, json=body if body is not None else {})

    def delete(self, path: str, **headers) -> httpx.Response:
        return self.http.delete(path, headers=headers or None)

    def json(self, path: str, **params):
        """GET `path`, which must answer 200, and its JSON."""
        response = self.get(path, **params)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def wait_for(self, path: str, predicate, timeout: float = STATS_TIMEOUT, **params):
        """GET `path` until `predicate(json)` holds and return that JSON. RabbitMQ's
        statistics (connections, channels, message counts) are collected periodically,
        so a change shows up there only after some time: polling the API is the only way
        to see it. Fails with the last answer after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.json(path, **params)
            if predicate(answer):
                return answer
            assert time.monotonic() < deadline, (
                f"GET {path} did not satisfy the condition within {timeout} s; last "
                f"answer: {answer!r}"[:4000])
            time.sleep(0.1)


def quoted(name: str) -> str:
    """A vhost or object name as a path segment ("/" is %2F)."""
    return urllib.parse.quote(name, safe="")
