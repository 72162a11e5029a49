"""The management web UI in a real browser: headless Chromium driven by selenium through
the system's chromedriver, against an embedded broker with pika clients on the AMQP side.

Selenium rather than raw DevTools: its WebDriver calls (find, click, type, wait, read the
console log) make each test read as what a user does, and it drives the chromedriver
the OS installed, given by path: Selenium Manager, which would download a driver or a
browser, never runs. Without Chromium or chromedriver (a CI machine may lack them) the
browser tests skip, saying which is missing. Set KANIN_UI_SCREENSHOTS to a folder to keep
a screenshot of each page a test shows.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from helpers import BrokerFactory
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 15  # the longest a page may take to show what a test waits for


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing = "chromium" if CHROMIUM is None else "chromedriver"
        pytest.skip(f"{missing} is not installed (Debian: apt-get install chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1366,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SE_OFFLINE", "true")  # Selenium Manager, were it asked, fetches nothing
        browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()


class Ui:
    """The browser on one broker's UI, logged in as guest."""

    def __init__(self, driver: Any, embedded: Any) -> None:
        self.driver = driver
        self.embedded = embedded
        self.base = embedded.mgmt_url
        self.api = Api(self.base)

    def wait_for(self, condition: Callable[[Any], Any], what: str) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, WAIT_S).until(condition, f"waited for {what}")

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.wait_for(lambda d: d.find_element(By.CSS_SELECTOR, selector), selector)

    def text_shown(self, text: str) -> None:
        self.wait_for(lambda d: text in d.find_element("tag name", "body").text, repr(text))

    def login(self, user: str = "guest", password: str = "guest") -> None:
        self.driver.get(self.base + "/")
        self.css("#username").send_keys(user)
        self.css("#password").send_keys(password)
        self.css("#login-button").click()

    def show(self, page: str, expect: str) -> None:
        """Open #/page and wait until it shows `expect` (the page's live data)."""
        self.driver.get(f"{self.base}/#/{page}")
        self.text_shown(expect)
        folder = os.environ.get("KANIN_UI_SCREENSHOTS")
        if folder:
            name = page.replace("/", "_").replace("%", "") or "overview"
            self.driver.save_screenshot(str(Path(folder) / f"{name}.png"))

    def fill(self, form: str, **values: str) -> None:
        from selenium.webdriver.support.ui import Select

        for name, value in values.items():
            element = self.css(f"#{form} [name={name}]")
            if element.tag_name == "select":
                Select(element).select_by_value(value)
            else:
                element.clear()
                element.send_keys(value)
        self.css(f"#{form} button[type=submit]").click()

    def confirm_click(self, selector: str) -> None:
        """A destructive button: armed by the first click, done by the second. A refresh
        already under way when it was armed may draw the page anew between the clicks
        (the periodic one waits while a button is armed): then arm the new button."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        def armed(driver: Any) -> Any:
            button = driver.find_element(By.CSS_SELECTOR, selector)
            return button if "Confirm" in button.text else False

        for _attempt in range(3):
            try:
                self.css(selector).click()
                self.wait_for(armed, f"{selector} armed").click()
                return
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"{selector}: the page was drawn anew at every try")

    def console_errors(self) -> list[dict[str, Any]]:
        return [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture
def ui(driver: Any, broker_factory: BrokerFactory) -> Iterator[Ui]:
    with broker_factory(mgmt_port=0) as embedded:
        session = Ui(driver, embedded)
        driver.get_log("browser")  # what earlier tests left
        yield session
        driver.get(session.base + "/")
        driver.execute_script("sessionStorage.clear()")


def _pika(embedded: Any, name: str = "ui-test-client") -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            embedded.host, embedded.port, client_properties={"connection_name": name}
        )
    )


def _sample_rates(embedded: Any) -> None:
    context = embedded.server.mgmt.context
    embedded.call(lambda: context.rates.sample(context.broker, context.unacked_by_queue()))


# -- the files, over plain HTTP (no browser needed) ------------------------------------------


def test_the_ui_is_served_without_credentials_and_the_api_still_needs_them(
    broker_factory: BrokerFactory,
) -> None:
    with broker_factory(mgmt_port=0) as embedded:
        api = Api(embedded.mgmt_url)
        page = api.request("GET", "/", auth=False)
        assert page.status == 200 and "login-form" in page.text
        script = api.request("GET", "/ui/app.js", auth=False)
        assert script.status == 200 and "javascript" in script.headers["Content-Type"]
        assert api.request("GET", "/ui/nosuch.js", auth=False).status == 404
        assert api.request("GET", "/ui/..%2Fweb_ui.py", auth=False).status == 404
        refused = api.request("GET", "/api/overview", auth=False)
        assert refused.status == 401 and "WWW-Authenticate" in refused.headers
        scripted = api.request(
            "GET", "/api/overview", auth=False, headers={"X-Requested-With": "XMLHttpRequest"}
        )
        assert scripted.status == 401 and "WWW-Authenticate" not in scripted.headers


# -- in the browser (about 25 s together, most of it Chromium starting and rendering) ------------

browser_test = pytest.mark.slow


@browser_test
def test_every_page_shows_live_data_without_console_errors(ui: Ui) -> None:
    with _pika(ui.embedded, "watched-client") as connection:
        channel = connection.channel()
        channel.queue_declare("ui-orders", durable=True)
        channel.exchange_declare("ui-events", "topic")
        channel.basic_qos(prefetch_count=11)
        limits = {"pattern": "^ui-", "apply-to": "all", "definition": {"max-length": 100}}
        assert ui.api.put("/api/policies/%2F/ui-limits", limits).status == 201
        for _ in range(3):
            channel.basic_publish("", "ui-orders", b"order")
        _sample_rates(ui.embedded)
        ui.login()
        ui.text_shown("Queued messages")
        shown = {
            "": "Message rates",
            "connections": "watched-client",
            "channels": "guest",
            "exchanges": "ui-events",
            "queues": "ui-orders",
            "queue/%2F/ui-orders": '{"max-length":100}',  # the effective policy definition
            "exchange/%2F/ui-events": "ui-limits",  # its policy
            "users": "administrator",
            "vhosts": "Add a virtual host",
            "policies": "max-length: 100",
        }
        for page, expected in shown.items():
            ui.show(page, expected)
        ui.show("", "Message rates")
        ui.wait_for(lambda d: d.find_element("id", "total-ready").text.startswith("3"), "3 ready")
        assert ui.driver.find_elements("css selector", ".chart-svg polyline")
    assert ui.console_errors() == []


@browser_test
def test_a_message_published_in_the_ui_is_got_over_amqp(ui: Ui) -> None:
    with _pika(ui.embedded) as connection:
        channel = connection.channel()
        channel.queue_declare("ui-inbox")
        ui.login()
        ui.show("queue/%2F/ui-inbox", "Publish message")
        ui.fill("publish-form", payload="hello from the browser", delivery_mode="2")
        ui.text_shown("Message published.")
        method, properties, body = channel.basic_get("ui-inbox", auto_ack=True)
    assert method is not None
    assert body == b"hello from the browser"
    assert properties.delivery_mode == 2
    assert ui.console_errors() == []


@browser_test
def test_messages_published_over_amqp_are_got_in_the_ui_and_stay(ui: Ui) -> None:
    with _pika(ui.embedded) as connection:
        channel = connection.channel()
        channel.queue_declare("ui-peek")
        channel.basic_publish("", "ui-peek", b"first <b>not bold</b>")
        channel.basic_publish("", "ui-peek", b"second")
        ui.login()
        ui.show("queue/%2F/ui-peek", "Get messages")
        ui.fill("get-form", count="2", ackmode="ack_requeue_true")
        ui.text_shown("2 message(s) taken.")
        shown = ui.css("#get-results").text
        assert "first <b>not bold</b>" in shown and "second" in shown  # as text, not HTML
        assert channel.queue_declare("ui-peek", passive=True).method.message_count == 2


@browser_test
def test_purge_and_delete_in_the_ui_act_on_the_queue(ui: Ui) -> None:
    with _pika(ui.embedded) as connection:
        channel = connection.channel()
        channel.queue_declare("ui-doomed")
        for _ in range(5):
            channel.basic_publish("", "ui-doomed", b"x")
        ui.login()
        ui.show("queue/%2F/ui-doomed", "Purge messages")
        ui.confirm_click("#purge-queue")
        ui.text_shown("Queue ui-doomed purged.")
        assert channel.queue_declare("ui-doomed", passive=True).method.message_count == 0
        ui.confirm_click("#delete-queue")
        ui.text_shown("Queue ui-doomed deleted.")
        ui.wait_for(lambda d: d.current_url.endswith("#/queues"), "the queue list")
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel.queue_declare("ui-doomed", passive=True)
        assert closed.value.reply_code == 404
    assert ui.console_errors() == []


@browser_test
def test_a_connection_closed_in_the_ui_is_closed_for_its_client(ui: Ui) -> None:
    connection = _pika(ui.embedded, "to-be-closed")
    try:
        ui.login()
        ui.show("connections", "to-be-closed")
        ui.confirm_click("button[data-connection]")
        ui.text_shown("closed.")
        with pytest.raises(ConnectionClosedByBroker) as closed:
            connection.process_data_events(time_limit=WAIT_S)
        assert closed.value.reply_code == 320
        assert "kanin management UI" in closed.value.reply_text
    finally:
        if connection.is_open:
            connection.close()


@browser_test
def test_users_and_permissions_are_managed_in_the_ui(ui: Ui) -> None:
    ui.login()
    ui.show("users", "Add a user")
    ui.fill("user-form", name="carol", password="s3cret", tags="management")
    ui.text_shown("User carol added.")
    ui.wait_for(lambda d: "carol" in d.find_element("id", "users-list").text, "carol listed")
    ui.fill("permission-form", user="carol", configure="^carol", write=".*", read=".*")
    ui.text_shown("Permissions of carol in / set.")
    permission = ui.api.get("/api/permissions/%2F/carol").json
    assert (permission["configure"], permission["write"]) == ("^carol", ".*")
    with pika.BlockingConnection(
        pika.ConnectionParameters(
            ui.embedded.host, ui.embedded.port, credentials=pika.PlainCredentials("carol", "s3cret")
        )
    ) as connection:
        connection.channel().queue_declare("carol-queue")
    ui.confirm_click("button[data-user=carol]")
    ui.text_shown("User carol deleted.")
    assert ui.api.get("/api/users/carol").status == 404
    assert ui.console_errors() == []


@browser_test
def test_wrong_credentials_are_refused_on_the_login_form(ui: Ui) -> None:
    ui.login("guest", "not-the-password")
    ui.wait_for(lambda d: "Login failed" in d.find_element("id", "login-error").text, "the refusal")
    assert ui.driver.find_element("id", "shell").is_displayed() is False
    # The only console complaint is the refused request itself.
    assert all("401" in entry["message"] for entry in ui.console_errors())


@browser_test
def test_a_policy_added_in_the_ui_acts_on_a_queue_and_is_deleted_there(ui: Ui) -> None:
    with _pika(ui.embedded) as connection:
        channel = connection.channel()
        channel.queue_declare("ui-capped")
        for n in range(5):
            channel.basic_publish("", "ui-capped", str(n).encode())
        ui.login()
        ui.show("policies", "No policies")
        ui.css("#policy-form .definition-key").send_keys("max-length")
        ui.css("#policy-form .definition-value").send_keys("2")  # typed text, sent as 2
        ui.fill(
            "policy-form",
            name="ui-cap",
            pattern="^ui-capped$",
            priority="3",
            definition_json='{"message-ttl": 60000}',
            **{"apply-to": "queues"},
        )
        ui.text_shown("Policy ui-cap set in /.")
        assert ui.api.get("/api/policies/%2F/ui-cap").json == {
            "vhost": "/",
            "name": "ui-cap",
            "pattern": "^ui-capped$",
            "apply-to": "queues",
            "priority": 3,
            "definition": {"max-length": 2, "message-ttl": 60000},
        }
        # max-length drops from the head: the two newest stay.
        assert [channel.basic_get("ui-capped", auto_ack=True)[2] for _ in range(3)] == [
            b"3",
            b"4",
            None,
        ]
        ui.wait_for(
            lambda d: "max-length: 2" in d.find_element("id", "policies-list").text, "listed"
        )
        ui.show("queues", "ui-capped")
        ui.wait_for(
            lambda d: d.find_element("css selector", "#queues-list a.policy-name").text == "ui-cap",
            "the queue's policy listed",
        )
        ui.show("queue/%2F/ui-capped", "message-ttl")
        assert ui.css("#queue-policy").text == "ui-cap"
        assert '"max-length":2' in ui.css("#queue-effective-policy").text
        assert ui.console_errors() == []

        ui.show("policies", "ui-cap")
        ui.confirm_click("button[data-policy='/ ui-cap']")
        ui.text_shown("Policy ui-cap deleted from /.")
        ui.wait_for(lambda d: "No policies" in d.find_element("id", "policies-list").text, "gone")
        assert ui.api.get("/api/policies/%2F/ui-cap").status == 404
        assert ui.api.get("/api/queues/%2F/ui-capped").json["policy"] is None
    assert ui.console_errors() == []


@browser_test
def test_a_listed_policy_is_edited_in_the_form(ui: Ui) -> None:
    first = {
        "pattern": "^a",
        "apply-to": "exchanges",
        "priority": 7,
        "definition": {"alternate-exchange": "ae"},
    }
    assert ui.api.put("/api/policies/%2F/ui-edit", first).status == 201
    ui.login()
    ui.show("policies", "alternate-exchange: ae")
    ui.css("button[data-edit-policy='/ ui-edit']").click()
    value = ui.css("#policy-form .definition-value")
    assert ui.css("#policy-form [name=pattern]").get_attribute("value") == "^a"
    assert value.get_attribute("value") == "ae"
    value.clear()
    value.send_keys("other-ae")
    ui.css("#policy-form button[type=submit]").click()
    ui.text_shown("Policy ui-edit set in /.")
    assert ui.api.get("/api/policies/%2F/ui-edit").json == {
        **first,
        "vhost": "/",
        "name": "ui-edit",
        "definition": {"alternate-exchange": "other-ae"},
    }


@browser_test
def test_a_refused_policy_shows_the_brokers_reason(ui: Ui) -> None:
    ui.login()
    ui.show("policies", "No policies")
    ui.css("#policy-form .definition-key").send_keys("max-length")
    ui.css("#policy-form .definition-value").send_keys("ten")
    ui.fill("policy-form", name="ui-bad", pattern="(")
    refusal = ui.css("#policy-refusal")
    ui.wait_for(lambda d: "pattern should be regular" in refusal.text, "the regex refused")
    ui.fill("policy-form", pattern="^ok$")
    ui.wait_for(lambda d: "is not a valid maximum length" in refusal.text, "the value refused")
    ui.css("#policy-form .definition-value").clear()
    ui.css("#policy-form .definition-value").send_keys("10")
    ui.fill("policy-form", definition_json='{"no-such-key": 1}')
    ui.wait_for(lambda d: "no-such-key" in refusal.text, "the unknown key refused")
    assert ui.api.get("/api/policies").json == []
    # The only console complaints are the refused requests.
    assert all("400" in entry["message"] for entry in ui.console_errors())


@browser_test
def test_equal_chart_series_are_drawn_so_that_both_show(ui: Ui) -> None:
    ui.login()
    ui.show("", "Overview")
    points = [[1000, 1], [6000, 4], [11000, 2]]
    other = [[1000, 0], [6000, 0], [11000, 0]]
    styles = ui.driver.execute_async_script(
        """
        const [points, other, done] = arguments;
        import("/ui/chart.js").then(({ lineChart }) => {
          const chart = lineChart("t", [
            { label: "Publish", points }, { label: "Publisher confirm", points },
            { label: "Redelivered", points: other }, { label: "Consumer ack", points },
          ]);
          const lines = [...chart.querySelectorAll("polyline")];
          const dash = (l) => ["stroke-dasharray", "stroke-dashoffset"].map((a) =>
            l.getAttribute(a));
          done(lines.map(dash));
        });
        """,
        points,
        other,
    )
    # The first of the equal three solid, the others dashed each in a place of its own.
    assert styles == [[None, None], ["6 12", "0"], [None, None], ["6 12", "-6"]]
