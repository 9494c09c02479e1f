"""What the browser scripts under Advanced share: headless Chromium with its downloads in a
folder, and waiting for a condition while noting what was waited for (the step a failure names)."""

import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def chromium(downloads):
    """Headless Chromium (Debian's, through its driver) saving downloads into `downloads`."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]:
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


class Waiting:
    """Waits for conditions; `step` names the last one waited for, `meanwhile` runs while waiting."""

    def __init__(self, meanwhile=None):
        self.step = "start"
        self.meanwhile = meanwhile

    def until(self, check, what, seconds=90):
        """The first truthy value of `check` within `seconds` (exceptions count as not yet)."""
        self.step = what
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                value = check()
                if value:
                    return value
            except Exception:  # not there yet
                pass
            if self.meanwhile:
                self.meanwhile()
            time.sleep(0.2)
        raise TimeoutError("timed out waiting for " + what)
