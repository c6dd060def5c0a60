"""The management HTTP API's listener, login and error shapes. Runs against Warren and,
with WARREN_TEST_BROKER and WARREN_TEST_MANAGEMENT, against RabbitMQ's management plugin
(scripts/test.sh's second run does)."""

import httpx


def test_whoami_names_the_caller_and_its_tags(api):
    assert api.json("/api/whoami") == {"name": "guest", "tags": ["administrator"]}


def test_a_request_without_credentials_is_asked_for_them(api):
    response = httpx.get(api.base_url + "/api/whoami")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert response.content == b""


def test_a_wrong_password_is_refused_with_rabbitmqs_body(api):
    response = api.as_user("guest", "wrong").get("/api/whoami")
    assert response.status_code == 401
    assert response.json() == {"error": "not_authorized", "reason": "Login failed"}


def test_a_user_without_a_management_tag_may_not_use_the_api(api, broker_admin):
    admin = broker_admin
    admin.add_user("api-no-tags", "pw")
    try:
        response = api.as_user("api-no-tags", "pw").get("/api/whoami")
        assert response.status_code == 401
        assert response.json() == {"error": "not_authorised",
                                   "reason": "Not management user"}
    finally:
        admin.delete_user("api-no-tags")


def test_an_unknown_path_is_not_found_with_rabbitmqs_body(api):
    response = api.get("/api/no-such-thing")
    assert response.status_code == 404
    assert response.json() == {"error": "Object Not Found", "reason": "Not Found"}
