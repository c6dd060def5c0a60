"""The web UI in a real browser (headless chromium, tests/support/browser.py) against a Warren
broker: what an operator does with it reaches the broker, as pika sees it. The browser logs
in as guest, an administrator, and the queues are guest's on `/` of the session broker
(`warren_broker`), not in a `warren` vhost: the pages show the broker-wide view.

With WARREN_UI_SCREENSHOTS=docs/ui, each page's screenshot is saved there."""

import httpx
import pika
import pika.exceptions
import pytest
from selenium.webdriver.common.by import By

from tests.support.browser import WebUi, chromium
from tests.support.management_client import quoted
from tests.support.pika_helpers import _test_deadline, close_quietly, connect, unique  # noqa: F401

pytestmark = pytest.mark.warren_only("the web UI is Warren's")
PIKA_TEST_TIMEOUT = 120   # a browser session per test: starting chromium takes seconds


@pytest.fixture(scope="module")
def driver():
    browser = chromium()
    yield browser
    browser.quit()


@pytest.fixture
def ui(driver, warren_broker):
    return WebUi(driver, warren_broker.management_url)


@pytest.fixture
def logged_in(ui):
    ui.log_in()
    ui.wait_for_text("#whoami", "guest")
    return ui


@pytest.fixture
def connection(warren_broker):
    opened = connect(warren_broker)
    yield opened
    close_quietly(opened)


@pytest.fixture
def queue(connection):
    """A queue declared by pika, deleted afterwards if the test has not."""
    name = unique("ui-queue")
    connection.channel().queue_declare(name)
    yield name
    if connection.is_open:
        connection.channel().queue_delete(name)


def row_link(ui: WebUi, table: str, text: str) -> None:
    """Clicks the link of the row of `table` that shows `text` in one of its cells."""
    ui.wait_for_text(table, text)
    ui.click_xpath(f"//table[@id='{table[1:]}']//tr[td[normalize-space()='{text}']]//a")


def open_queue(ui: WebUi, name: str) -> None:
    ui.go("#/queues")
    ui.type("#queues-filter", name)
    ui.click("#queues-filter + button")
    row_link(ui, "#queues-table", name)
    ui.wait_for_text("#queue-name", name)


# ---- served now by this branch (the page, its files, /api/whoami) ----------------

def test_the_page_and_its_files_are_served_without_credentials(warren_broker):
    page = httpx.get(warren_broker.management_url + "/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<form id="login"' in page.text
    script = httpx.get(warren_broker.management_url + "/ui/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    # The page may load only its own files: nothing from elsewhere, no inline script.
    assert script.headers["content-security-policy"].startswith("default-src 'self'")
    assert httpx.get(warren_broker.management_url + "/ui/style.css").status_code == 200
    assert httpx.get(warren_broker.management_url + "/ui/no-such.js").status_code == 404


def test_logging_in_shows_who_is_logged_in(ui):
    ui.log_in()
    assert ui.wait_for_text("#whoami", "guest").text == "guest (administrator)"
    assert ui.find("#nav").is_displayed()
    assert not ui.driver.find_element(By.ID, "login").is_displayed()


def test_a_wrong_password_shows_an_error_and_keeps_the_login_form(ui):
    ui.log_in("guest", "not-the-password")
    assert "Login failed" in ui.wait_for_text("#login-error", "Login failed").text
    assert not ui.driver.find_element(By.ID, "nav").is_displayed()
    assert ui.driver.execute_script("return sessionStorage.getItem('warren.password')") is None


# ---- these need the API endpoints of the other issue-16 branches -----------------

def test_the_overview_shows_totals_and_a_chart(queue, logged_in):
    """The queue is declared before logging in, whose first page is the overview; the
    count is read in the wait's predicate, as the page re-renders it on each refresh."""
    logged_in.go("#/overview")
    logged_in.wait().until(lambda driver: driver.execute_script(
        "const value = document.querySelector('#total-queues .value');"
        " return value !== null && Number(value.textContent) >= 1"))
    assert logged_in.driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
    logged_in.screenshot("overview")


def test_queues_declared_by_pika_are_listed_filtered_and_sorted(logged_in, connection):
    prefix = unique("ui-sorted")
    names = [f"{prefix}-a", f"{prefix}-b"]
    channel = connection.channel()
    for name in names:
        channel.queue_declare(name, auto_delete=True, exclusive=True)
    logged_in.go("#/queues")
    logged_in.type("#queues-filter", prefix)
    logged_in.click("#queues-filter + button")
    logged_in.wait_for_text("#queues-table", names[1])
    assert listed_names(logged_in) == names
    logged_in.screenshot("queues")
    logged_in.click("th[data-sort='name']")   # sorted by name already: now reversed
    logged_in.wait_for_text("th[data-sort='name']", "▼")
    assert listed_names(logged_in) == names[::-1]


def listed_names(ui: WebUi) -> list[str]:
    """The names in the queues table, read in one script: the page re-renders the table
    as it refreshes, and cells looked up one by one can be stale by the time they are
    read (StaleElementReferenceException in a loaded CI run)."""
    return ui.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " cell => cell.innerText.trim())", "#queues-table tbody td:nth-child(2)")


def test_a_message_published_from_the_ui_is_got_by_pika(logged_in, queue, connection):
    open_queue(logged_in, queue)
    logged_in.type("#publish-payload", "hello from the web UI")
    logged_in.click("#publish-submit")
    logged_in.wait_for_text("#notice", "Message published")
    method, properties, body = connection.channel().basic_get(queue, auto_ack=True)
    assert body == b"hello from the web UI"
    assert method.routing_key == queue


def test_getting_a_message_shows_its_payload_and_properties(logged_in, queue, connection,
                                                             api):
    connection.channel().basic_publish(
        "", queue, b"payload <b>not markup</b>",
        pika.BasicProperties(content_type="text/plain", headers={"origin": "pika"}))
    api.wait_for(f"/api/queues/%2F/{quoted(queue)}",
                 lambda q: q.get("messages") == 1)
    open_queue(logged_in, queue)
    logged_in.screenshot("queue-detail")
    logged_in.choose("#get-ackmode", "ack_requeue_true")
    logged_in.click("#get-submit")
    message = logged_in.wait_for_text("#got-messages", "payload <b>not markup</b>")
    assert "text/plain" in message.text and "origin" in message.text
    assert not message.find_elements(By.TAG_NAME, "b")   # shown as text, not markup
    # ack_requeue_true puts it back.
    assert connection.channel().basic_get(queue, auto_ack=True)[2] == b"payload <b>not markup</b>"


def test_purge_then_delete_from_the_ui(logged_in, queue, connection, api):
    channel = connection.channel()
    for number in range(3):
        channel.basic_publish("", queue, f"message {number}".encode())
    api.wait_for(f"/api/queues/%2F/{quoted(queue)}",
                 lambda q: q.get("messages") == 3)
    open_queue(logged_in, queue)
    logged_in.click("#purge")
    logged_in.accept_confirmation()
    logged_in.wait_for_text("#notice", "purged")
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    logged_in.click("#delete")
    logged_in.accept_confirmation()
    logged_in.wait_for_text("#notice", "deleted")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare(queue, passive=True)
    assert refused.value.reply_code == 404


def test_the_exchanges_page_lists_exchanges_and_shows_bindings(logged_in, queue,
                                                               connection):
    connection.channel().queue_bind(queue, "amq.direct", routing_key="ui-key")
    logged_in.go("#/exchanges")
    logged_in.wait_for_text("#exchanges-table", "amq.topic")
    logged_in.screenshot("exchanges")
    row_link(logged_in, "#exchanges-table", "amq.direct")
    bindings = logged_in.wait_for_text("#bindings-table", queue)
    assert "ui-key" in bindings.text


def test_closing_a_connection_from_the_ui_closes_it_for_pika(logged_in, warren_broker):
    client_name = unique("ui-connection")
    victim = connect(warren_broker, client_properties={"connection_name": client_name})
    try:
        logged_in.go("#/connections")
        logged_in.wait_for_text("#connections-table", client_name)
        logged_in.screenshot("connections")
        row_link(logged_in, "#connections-table", client_name)
        logged_in.type("#close-reason", "closed by the UI test")
        logged_in.click("#close")
        logged_in.accept_confirmation()
        logged_in.wait_for_text("#notice", "closed")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            while True:   # bounded by the test's deadline (_test_deadline)
                victim.process_data_events(time_limit=1)
        assert closed.value.reply_code == 320
        assert "closed by the UI test" in closed.value.reply_text
    finally:
        close_quietly(victim)


def test_admin_adds_and_deletes_a_user_a_vhost_and_a_policy(logged_in, api):
    user, vhost, policy = unique("ui-user"), unique("ui-vhost"), unique("ui-policy")
    try:
        logged_in.go("#/admin")
        logged_in.type("#add-user input[name=name]", user)
        logged_in.type("#add-user input[name=password]", "secret")
        logged_in.type("#add-user input[name=tags]", "monitoring")
        logged_in.click("#add-user button")
        logged_in.wait_for_text("#users-table", user)
        assert api.json(f"/api/users/{quoted(user)}")["tags"] == ["monitoring"]

        logged_in.type("#add-vhost input[name=name]", vhost)
        logged_in.click("#add-vhost button")
        logged_in.wait_for_text("#vhosts-table", vhost)

        logged_in.choose("#set-permission select[name=user]", user)
        logged_in.choose("#set-permission select[name=vhost]", vhost)
        logged_in.type("#set-permission input[name=write]", "^ui-")
        logged_in.click("#set-permission button")
        logged_in.wait_for_text("#permissions-table", "^ui-")
        permission = api.json(f"/api/permissions/{quoted(vhost)}/{quoted(user)}")
        assert (permission["configure"], permission["write"]) == (".*", "^ui-")

        logged_in.choose("#add-policy select[name=vhost]", vhost)
        logged_in.type("#add-policy input[name=name]", policy)
        logged_in.type("#add-policy input[name=pattern]", "^ui-")
        logged_in.type("#add-policy input[name=definition]", '{"max-length": 10}')
        logged_in.click("#add-policy button")
        logged_in.wait_for_text("#policies-table", policy)
        assert api.json(f"/api/policies/{quoted(vhost)}/{quoted(policy)}")[
            "definition"] == {"max-length": 10}
        logged_in.screenshot("admin")

        for what in (f"policy {policy}", f"virtual host {vhost}", f"user {user}"):
            logged_in.click(f"button[data-delete='{what}']")
            logged_in.accept_confirmation()
            logged_in.wait_for_text("#notice", f"Deleted {what}")
        assert api.get(f"/api/users/{quoted(user)}").status_code == 404
        assert api.get(f"/api/vhosts/{quoted(vhost)}").status_code == 404
    finally:
        api.delete(f"/api/vhosts/{quoted(vhost)}")
        api.delete(f"/api/users/{quoted(user)}")
