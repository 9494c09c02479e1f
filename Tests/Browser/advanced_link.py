#!/usr/bin/env python3
"""Public links under Advanced Data Protection in a real browser (Chromium through Selenium).
A link's page opens the manifest its device sealed with the key after "#" (which the browser
never sends), shows the file's name, and downloads it, opening each chunk itself.

Argument (JSON on the command line): good (a link whose answers reach the page as the server
sent them), changed (a link whose chunks the server changes on their way), downloads (a folder).
Prints one JSON line: {name, downloaded (base64), changed, savedChanged, wrongKey, noKey}
or {error, step}.
"""

import base64
import json
import os
import sys
import time

from selenium.webdriver.common.by import By

from browser_support import Waiting, chromium

args = json.loads(sys.argv[1])
driver = chromium(args["downloads"])
waiting = Waiting()
eventually = waiting.until


def state():
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-state")


def error():
    return driver.find_element(By.ID, "link-error").text


def opened(url):
    """Opens a link's page and waits for it to be ready or to fail."""
    driver.get("about:blank")
    driver.get(url)
    return eventually(lambda: state() in ("ready", "failed") and state(), "the link's page")


def saved():
    return sorted(name for name in os.listdir(args["downloads"]))


try:
    result = {}
    # The whole link: the page names the file and downloads it to its very bytes.
    if opened(args["good"]) != "ready":
        raise RuntimeError("the link did not open: " + error())
    result["name"] = driver.find_element(By.ID, "link-name").text
    driver.find_element(By.ID, "link-download").click()
    eventually(lambda: state() in ("downloaded", "failed"), "the download", 180)
    if state() == "failed":
        raise RuntimeError("the download failed: " + error())
    target = os.path.join(args["downloads"], result["name"])
    eventually(lambda: os.path.exists(target) and not os.path.exists(target + ".crdownload") and os.path.getsize(target) > 0, "the saved file", 60)
    time.sleep(0.5)
    with open(target, "rb") as handle:
        result["downloaded"] = base64.b64encode(handle.read()).decode()
    before = saved()

    # A link whose chunks the server changes: the page refuses them and saves nothing.
    if opened(args["changed"]) != "ready":
        raise RuntimeError("the second link did not open: " + error())
    driver.find_element(By.ID, "link-download").click()
    eventually(lambda: state() in ("downloaded", "failed"), "the refused download", 120)
    result["changed"] = error()
    time.sleep(1)
    result["savedChanged"] = saved() != before

    # The key changed by one character, or left off: nothing opens.
    good = args["good"]
    key = good.split("#k=", 1)[1]
    wrong = good.split("#k=", 1)[0] + "#k=" + ("B" if key[0] != "B" else "C") + key[1:]
    opened(wrong)
    result["wrongKey"] = error()
    opened(good.split("#", 1)[0])
    result["noKey"] = error()
    print(json.dumps(result))
except Exception as failure:  # reported to the test, which shows it
    print(json.dumps({"error": str(failure), "step": waiting.step}))
finally:
    driver.quit()
