"""A real headless Chromium on the dashboard (Debian's chromium + chromium-driver).

Shared by tests/integration/test_dashboard_browser.py and the e2e dashboard test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOKEN_KEY = "airig.token"


def browser_missing() -> str | None:
    """None when a browser test can run, else why not."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed (apt-get install chromium-driver; .ci/run does)"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium is not installed (apt-get install chromium; .ci/run does)"
    return None


def artifacts_dir() -> Path:
    """Where screenshots go: $AIRIG_TEST_ARTIFACTS, else <repo>/test-artifacts/."""
    path = Path(os.environ.get("AIRIG_TEST_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    # Root in a container: no sandbox; /dev/shm is small there.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    # An explicit driver path: Selenium Manager never downloads anything.
    service = Service(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Dashboard:
    """The page in one browser, with waits on its DOM (never on sleeps)."""

    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url.rstrip("/")

    def wait(self, check: Callable[[Any], Any], timeout: float = 20, what: str = "") -> Any:
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.2).until(check)
        except TimeoutException:
            state = self.driver.execute_script(
                "return document.body.dataset.view + ' | ' + "
                "document.querySelector('#conn-text').textContent"
            )
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what} ({state})"
            ) from None

    # The page redraws its views on every poll, so element handles go stale: reads are
    # one script call each (atomic in the page), clicks retry on a fresh handle.
    def texts(self, selector: str) -> list[str]:
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
            selector,
        )

    def text(self, selector: str) -> str | None:
        found = self.texts(selector)
        return found[0] if found else None

    def attrs(self, selector: str, name: str) -> list[str | None]:
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])]"
            ".map(e => e.getAttribute(arguments[1]))",
            selector, name,
        )  # fmt: skip

    def visible(self, selector: str) -> bool:
        return bool(self.driver.execute_script(
            "const e = document.querySelector(arguments[0]);"
            "return !!e && !!(e.offsetWidth || e.offsetHeight)", selector,
        ))  # fmt: skip

    def wait_css(self, selector: str, timeout: float = 20) -> str:
        """Wait until the selector matches; its first match's text."""
        self.wait(lambda _: self.texts(selector), timeout, selector)
        return self.text(selector) or ""

    def click(self, selector: str) -> None:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        def clicked(driver: Any) -> bool:
            try:
                driver.find_element(By.CSS_SELECTOR, selector).click()
                return True
            except StaleElementReferenceException:
                return False

        self.wait(clicked, 10, f"a click on {selector}")

    def type_into(self, selector: str, text: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, selector).send_keys(text)

    def clear(self, selector: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(By.CSS_SELECTOR, selector).clear()

    def select(self, selector: str, value: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element(By.CSS_SELECTOR, selector)).select_by_value(value)

    def open(self) -> None:
        self.driver.get(f"{self.base_url}/dashboard")

    def sign_in(self, token: str) -> None:
        self.wait(lambda _: self.visible("#token-input"), what="the token form")
        self.type_into("#token-input", token)
        self.click("#token-form button[type=submit]")
        self.wait(lambda _: self.visible("#nav"), what="the signed-in page")

    def go(self, view: str) -> None:
        """Navigate like a user: a click on the nav (a hash change, no reload)."""
        self.click(f'[data-nav="{view}"]')
        self.wait(lambda d: d.execute_script("return document.body.dataset.view") == view,
                  what=f"the {view} page")  # fmt: skip

    def session_token(self) -> str | None:
        return self.driver.execute_script(f"return sessionStorage.getItem('{TOKEN_KEY}')")

    def requested_urls(self) -> list[str]:
        return self.driver.execute_script(
            "return [location.href, ...performance.getEntries().map(e => e.name)]"
        )

    def console_errors(self) -> list[str]:
        """Script errors, failed loads and CSP refusals the page logged since last asked."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        path = artifacts_dir() / name
        self.driver.save_screenshot(str(path))
        return path
