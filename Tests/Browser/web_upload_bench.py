#!/usr/bin/env python3
"""A file uploaded through the web interface in a real browser (Chromium through Selenium),
timed until the server has every byte: ubiquity-sync-bench's `webBrowserUploadMs`. The file is
looked for through the page's own listing (the browser's session), which shows names whether
the account's records are sealed or not.

Argument (JSON on the command line): url, account, password, container, file.
Prints one JSON line: {"ms": …} from the file chosen in the page's upload button to the file
committed whole on the server, or {"error": …}.
"""

import json
import os
import sys
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

args = json.loads(sys.argv[1])
url, container, path = args["url"], args["container"], args["file"]
name, size = os.path.basename(path), os.path.getsize(path)


def listed(cookies):
    """The container's top-level items named like the file, as the page lists them."""
    headers = {"Cookie": "; ".join("%s=%s" % (cookie["name"], cookie["value"]) for cookie in cookies)}
    query = "/web/api/containers/%s/folder?filter=%s" % (container, urllib.parse.quote(name))
    with urllib.request.urlopen(urllib.request.Request(url + query, headers=headers)) as answer:
        return json.loads(answer.read())["items"]


options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900", "--disable-gpu"]:
    options.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
try:
    driver.get(url + "/web/")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "sign-in").is_displayed())
    driver.find_element(By.ID, "account").send_keys(args["account"])
    driver.find_element(By.ID, "password").send_keys(args["password"])
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "containers").is_displayed())
    driver.get(url + "/web/#/c/" + container)
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "folder").is_displayed())
    cookies = driver.get_cookies()
    if any(item["name"] == name for item in listed(cookies)):
        raise RuntimeError("a file named %s is in the container already" % name)
    start = time.monotonic()
    driver.find_element(By.ID, "upload-files").send_keys(path)
    while True:
        if time.monotonic() - start > 300:
            raise RuntimeError("the upload did not reach the server in 300 s")
        if any(item["name"] == name and item["uploaded"] and item["size"] == size for item in listed(cookies)):
            break
        time.sleep(0.01)
    print(json.dumps({"ms": (time.monotonic() - start) * 1000}), flush=True)
except Exception as error:
    print(json.dumps({"error": repr(error)}), flush=True)
    sys.exit(1)
finally:
    driver.quit()
