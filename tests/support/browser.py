"""A headless Debian chromium driven by selenium, for the web UI's tests.

Debian's chromium and chromium-driver packages (scripts/test.sh installs them) give
/usr/bin/chromium and /usr/bin/chromedriver; selenium talks to that driver directly, so
nothing is downloaded. Every wait is a WebDriverWait on the page, never a sleep."""

import os
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 30.0   # seconds a page may take to show what a test waits for
# Screenshots of each page go to this directory when the variable is set (docs/ui).
SCREENSHOTS = os.environ.get("WARREN_UI_SCREENSHOTS")


def chromium() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--disable-gpu"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


class WebUi:
    """The UI at `base_url` in one browser: logs in, follows links, waits for text."""

    def __init__(self, driver: webdriver.Chrome, base_url: str):
        self.driver = driver
        self.base_url = base_url.rstrip("/")

    def open(self, route: str = "") -> None:
        self.driver.get(f"{self.base_url}/{route}")

    def log_in(self, user: str = "guest", password: str = "guest") -> None:
        """Logs in afresh: a session kept by an earlier test is forgotten first."""
        self.open()
        self.driver.execute_script("sessionStorage.clear()")
        self.open()
        self.type("#login-user", user)
        self.type("#login-password", password)
        self.click("#login-submit")

    def go(self, route: str) -> None:
        """Follows a hash route (#/queues ...) within the logged-in page."""
        self.driver.execute_script("location.hash = arguments[0]", route)

    def find(self, selector: str) -> WebElement:
        return self.wait().until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    def type(self, selector: str, text: str) -> None:
        def type_into(field: WebElement) -> None:
            field.clear()
            field.send_keys(text)

        self._act((By.CSS_SELECTOR, selector), type_into)

    def choose(self, selector: str, value: str) -> None:
        self._act((By.CSS_SELECTOR, selector),
                  lambda field: Select(field).select_by_value(value))

    def click(self, selector: str) -> None:
        self._act((By.CSS_SELECTOR, selector), WebElement.click, enabled=True)

    def click_link(self, text: str) -> None:
        self._act((By.LINK_TEXT, text), WebElement.click, enabled=True)

    def click_xpath(self, xpath: str) -> None:
        self._act((By.XPATH, xpath), WebElement.click, enabled=True)

    def _act(self, locator: tuple, action, enabled: bool = False) -> None:
        """Find the element and, once it is shown (and enabled, if asked), act on it,
        all in one wait predicate: an element the page re-rendered in between is
        looked up again."""
        def acted(driver) -> bool:
            element = driver.find_element(*locator)
            if not element.is_displayed() or (enabled and not element.is_enabled()):
                return False
            action(element)
            return True

        self.wait().until(acted)

    def accept_confirmation(self) -> None:
        self.wait().until(expected_conditions.alert_is_present()).accept()

    def wait_for_text(self, selector: str, text: str) -> WebElement:
        """The element at `selector` once its text contains `text`."""
        self.wait().until(expected_conditions.text_to_be_present_in_element(
            (By.CSS_SELECTOR, selector), text))
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def wait_until_gone(self, selector: str, text: str) -> None:
        self.wait().until(lambda driver: text not in driver.find_element(
            By.CSS_SELECTOR, selector).text)

    def wait(self) -> WebDriverWait:
        """Waits up to WAIT seconds. The page re-renders while it refreshes its tables:
        an element found just before is stale then, and is looked up again."""
        return WebDriverWait(self.driver, WAIT, ignored_exceptions=(
            NoSuchElementException, StaleElementReferenceException))

    def screenshot(self, name: str) -> None:
        """docs/ui/<name>.png when WARREN_UI_SCREENSHOTS names a directory."""
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            height = self.driver.execute_script(
                "window.scrollTo(0, 0); return document.documentElement.scrollHeight"
                " + window.outerHeight - window.innerHeight")
            self.driver.set_window_size(1280, max(800, min(height, 2400)))
            self.driver.save_screenshot(str(Path(SCREENSHOTS) / f"{name}.png"))
            self.driver.set_window_size(1280, 1000)
