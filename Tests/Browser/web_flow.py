#!/usr/bin/env python3
"""The web interface in a real browser (Chromium through Selenium), against a real server and
a real agent's device: WebBrowserTests runs it and reads its verdict.

Arguments (JSON on the command line): url, account, password, container, device (the device's
Documents folder), work (a scratch folder), screenshots (where the pictures go), others (the
names of the test's other devices, which hold the account's keys too).

Prints one line per step ("ok: …") and exits 0 when every step held; on the first that did
not, prints "FAILED: …" with what the page showed, and exits 1.
"""

import hashlib
import json
import os
import sys
import time
import traceback
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (ElementNotInteractableException, NoAlertPresentException,
                                        StaleElementReferenceException, TimeoutException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

args = json.loads(sys.argv[1])
url, container, device = args["url"], args["container"], args["device"]
others = args.get("others", [])  # the test's devices beside the laptop
work, shots = args["work"], args["screenshots"]
downloads = os.path.join(work, "downloads")
os.makedirs(downloads, exist_ok=True)
os.makedirs(shots, exist_ok=True)


def step(text):
    print("ok: " + text, flush=True)


def fail(text):
    print("FAILED: " + text, flush=True)
    try:
        print("page: " + driver.find_element(By.TAG_NAME, "body").text[:2000], flush=True)
        print("log: " + json.dumps(driver.get_log("browser"))[:2000], flush=True)
        driver.save_screenshot(os.path.join(work, "failure.png"))
    except Exception as error:  # the browser itself may be the failure
        print("no page: %r" % error, flush=True)
    sys.exit(1)


def shot(name):
    """A screenshot for docs/screenshots (without a passing status message)."""
    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.save_screenshot(os.path.join(shots, name))


def wait(condition, what, seconds=60):  # (returns at once when it holds; a loaded two-core run needs the room)
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.05).until(lambda _: condition())
    except TimeoutException:
        fail("waited %ss for %s" % (seconds, what))


def eventually(condition, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass  # a file the condition reads is not there yet (one of a folder's files arrives before the next)
        time.sleep(0.1)
    fail("waited %ss for %s" % (seconds, what))


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


FIND_ROW = "const r = [...document.querySelectorAll('#item-rows tr')].find(r => r.dataset.name === arguments[0]); "


def rows():
    """The names of the folder's rows (read in the page: rows are redrawn as changes arrive), none
    while the folder's section is hidden (rows of the last folder shown stay in the page while
    another section is up, and cannot be clicked)."""
    return driver.execute_script("""if (document.getElementById('folder').hidden) return [];
        return [...document.querySelectorAll('#item-rows tr')].map(r => r.dataset.name)""")


def has_row(name):
    return name in rows()


def row_text(name):
    return driver.execute_script(FIND_ROW + "return r ? r.innerText : null;", name)


def click_row(name):
    for _ in range(50):
        try:
            link = driver.execute_script(FIND_ROW + "return r ? r.querySelector('a') : null;", name)
            if link is not None:
                link.click()
                return
        except (StaleElementReferenceException, ElementNotInteractableException):
            pass
        time.sleep(0.1)
    fail("cannot click the row of " + name)


def row_action(name, label):
    """Opens the row's actions menu and clicks the action whose label starts with `label`."""
    for _ in range(50):
        try:
            action = driver.execute_script(FIND_ROW + """if (!r) return null; const menu = r.querySelector('details');
                if (!menu.open) menu.querySelector('summary').click();
                return [...r.querySelectorAll('details button')].find(b => b.textContent.startsWith(arguments[1])) || null;""", name, label)
            if action is not None:
                action.click()
                return
        except (StaleElementReferenceException, ElementNotInteractableException):
            pass
        time.sleep(0.1)
    fail("no action %r for %s" % (label, name))


def answer_dialog(text=None):
    """Accepts the page's confirm or prompt (typing `text` into a prompt)."""
    alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    if text is not None:
        alert.send_keys(text)
    alert.accept()


def v1(method, path, token=None, body=None, raw=None):
    """The sync API, as another device speaks it."""
    headers = {"Authorization": "Bearer " + token} if token else {}
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data, method=method, headers=headers)) as answer:
        text = answer.read()
        return json.loads(text) if text else None


def ask_device(question, name, seconds=60):
    """Asks the test, which acts on the device, `question` about `name`; its answer's text."""
    ask = os.path.join(work, "ask-" + question)
    answer = ask + ".answer"
    if os.path.exists(answer):
        os.remove(answer)
    with open(ask + ".tmp", "w") as f:
        f.write(name)
    os.rename(ask + ".tmp", ask)
    eventually(lambda: os.path.exists(answer), "the device's answer to " + question, seconds)
    with open(answer) as f:
        text = f.read()
    os.remove(answer)
    return text


def device_conflicts(name):
    """How many unresolved conflict versions the device's NSFileVersion lists for `name`."""
    return int(ask_device("conflicts", name, 30))


def device_publish(name):
    """Publishes `name` on the device (FileManager.url(forPublishingUbiquitousItemAt:expiration:))."""
    published = json.loads(ask_device("publish", name))
    if "error" in published:
        fail("the device could not publish %s: %s" % (name, published["error"]))
    return published


def fetch_link(address):
    """A link opened by someone else: no cookie, no session. The status, the headers and the body."""
    try:
        with urllib.request.urlopen(urllib.request.Request(address)) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, b""


def no_alert():
    try:
        driver.switch_to.alert
        fail("a script in a name ran (an alert is open)")
    except NoAlertPresentException:
        pass


options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900", "--disable-gpu"]:
    options.add_argument(flag)
options.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
# A machine under load may not bring the browser up the first time.
for attempt in range(3):
    try:
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        break
    except WebDriverException as error:
        if attempt == 2:
            print("FAILED: the browser did not start: %s" % error, flush=True)
            sys.exit(1)
        time.sleep(3)
try:
    # The page and its headers: scripts only from the server, no framing, no sniffing.
    with urllib.request.urlopen(url + "/web/") as answer:
        policy = answer.headers.get("Content-Security-Policy", "")
        if "script-src 'self'" not in policy or "unsafe-inline" in policy or answer.headers.get("X-Content-Type-Options") != "nosniff":
            fail("the page's security headers: %s" % dict(answer.headers))
    step("the page comes with a strict Content-Security-Policy")

    # Sign in: a wrong password first, then the right one.
    driver.get(url + "/web/")
    wait(lambda: driver.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form")
    shot("sign-in.png")
    driver.find_element(By.ID, "account").send_keys(args["account"])
    driver.find_element(By.ID, "password").send_keys("wrong password")
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    wait(lambda: "wrong password" in driver.find_element(By.ID, "sign-in-error").text, "the sign-in error")
    step("a wrong password is refused with a message")
    driver.find_element(By.ID, "password").clear()
    driver.find_element(By.ID, "password").send_keys(args["password"])
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    wait(lambda: driver.find_element(By.ID, "containers").is_displayed(), "the containers after signing in")
    cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
    session = cookies.get("__Host-ubiquity")
    if not session or not session.get("httpOnly") or not session.get("secure") or session.get("sameSite") != "Strict":
        fail("the session cookie: %r" % cookies)
    if driver.execute_script("return document.cookie") != "":
        fail("the page's script can read the session cookie")
    step("signed in: the session is an HttpOnly, Secure, SameSite=Strict cookie")

    # The container the device made is listed; open it: its documents (what is in Documents).
    wait(lambda: container in driver.find_element(By.ID, "container-rows").text, "the device's container")
    shot("containers.png")
    driver.find_element(By.LINK_TEXT, container).click()
    wait(lambda: driver.find_element(By.ID, "folder").is_displayed() and "Welcome.txt" in rows(), "the container's documents")
    step("browsed into the container: the device's first document is listed")

    # Upload a 5 MiB file: it arrives on the device, byte for byte.
    big = os.path.join(work, "Holiday.mov")
    with open(big, "wb") as f:
        f.write(os.urandom(5 * 1024 * 1024))
    driver.find_element(By.ID, "upload-files").send_keys(big)
    wait(lambda: has_row("Holiday.mov"), "the uploaded file's row", 120)
    eventually(lambda: os.path.exists(os.path.join(device, "Holiday.mov")) and digest(os.path.join(device, "Holiday.mov")) == digest(big),
               "the uploaded file on the device", 120)
    step("a 5 MiB upload reached the device byte for byte")

    # Upload a folder: its files arrive in a folder of the same name.
    tree = os.path.join(work, "Trip")
    os.makedirs(os.path.join(tree, "Photos"), exist_ok=True)
    with open(os.path.join(tree, "plan.txt"), "w") as f:
        f.write("pack the tent")
    with open(os.path.join(tree, "Photos", "tent.jpg"), "wb") as f:
        f.write(os.urandom(70000))
    driver.find_element(By.ID, "upload-folder").send_keys(tree)
    wait(lambda: has_row("Trip"), "the uploaded folder's row", 120)
    eventually(lambda: os.path.exists(os.path.join(device, "Trip", "Photos", "tent.jpg"))
               and digest(os.path.join(device, "Trip", "Photos", "tent.jpg")) == digest(os.path.join(tree, "Photos", "tent.jpg"))
               and open(os.path.join(device, "Trip", "plan.txt")).read() == "pack the tent", "the uploaded folder on the device", 120)
    step("a folder upload reached the device with its subfolder")

    # An upload cut by a reload of the page resumes: the same file chosen again sends only the
    # parts the server has not answered yet.
    lecture = os.path.join(work, "Lecture.mp4")
    with open(lecture, "wb") as f:
        f.write(os.urandom(40 * 1024 * 1024))
    parts_total = 10
    # Parts answered, counted (four go at once: a later one may be answered first, and the list
    # kept then has a hole where the first goes).
    kept = "return Object.keys(localStorage).filter(k => k.startsWith('ubiquity-upload:')).map(k => JSON.parse(localStorage.getItem(k)).parts.filter(p => Array.isArray(p)).length)"
    driver.find_element(By.ID, "upload-files").send_keys(lecture)
    wait(lambda: any(n >= 1 for n in driver.execute_script(kept)), "the first part of the long upload answered", 60)
    driver.refresh()
    wait(lambda: driver.find_element(By.ID, "folder").is_displayed() and "Welcome.txt" in rows(), "the folder after the reload")
    done_before = max(driver.execute_script(kept) or [0])
    if not 1 <= done_before < parts_total:
        fail("the reload did not cut the upload (%s of %s parts kept)" % (done_before, parts_total))
    driver.find_element(By.ID, "upload-files").send_keys(lecture)
    eventually(lambda: os.path.exists(os.path.join(device, "Lecture.mp4")) and digest(os.path.join(device, "Lecture.mp4")) == digest(lecture),
               "the resumed upload on the device", 120)
    # Parts answered by the server (a part refused on the way — busy, throttled — is tried
    # again by the page: one part, two requests; seen in CI under the whole suite's load).
    statuses = driver.execute_script("return performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === '/web/api/parts').map(e => e.responseStatus === undefined ? 200 : e.responseStatus)")
    sent_after = len([status for status in statuses if 200 <= status < 300])
    if sent_after != parts_total - done_before:
        fail("the resumed upload sent %s parts (statuses %s); %s of %s were answered before the reload" % (sent_after, statuses, done_before, parts_total))
    if driver.execute_script(kept):
        fail("a finished upload is still kept for resuming")
    step("an upload cut by a reload resumed: %d of %d parts sent again, the file whole on the device" % (sent_after, parts_total))

    # A document saved on the device appears in the open page by itself, then its edit.
    with open(os.path.join(device, "Notes.txt"), "w") as f:
        f.write("first draft")
    started = time.time()
    wait(lambda: has_row("Notes.txt"), "the device's new document in the open page", 60)
    step("a document saved on the device appeared in the page %.1f s later" % (time.time() - started))
    before = row_text("Notes.txt")
    with open(os.path.join(device, "Notes.txt"), "w") as f:
        f.write("second draft, a little longer")
    wait(lambda: row_text("Notes.txt") not in (None, before), "the device's edit in the open page", 60)
    step("the device's edit changed the page's row")

    # Download it back: the device's bytes, as an attachment.
    click_row("Notes.txt")
    target = os.path.join(downloads, "Notes.txt")
    eventually(lambda: os.path.exists(target) and open(target).read() == "second draft, a little longer", "the download", 60)
    step("downloaded the device's latest contents")

    # Searched by the server (a folder's page is sorted and searched there, a page at a time).
    search = driver.find_element(By.ID, "filter")
    search.send_keys("NOTES")
    wait(lambda: rows() == ["Notes.txt"], "only Notes.txt in the search's rows")
    search.clear()
    search.send_keys(" ")  # an input event: the search emptied
    wait(lambda: len(rows()) > 1 and "Notes.txt" in rows(), "every row again after the search")
    step("searching by name lists only what matches, case not counted")

    # Hostile names render as text: markup stays text.
    hostile = ["<script>alert(1)<_script>.txt", "<img src=x onerror=alert(2)>.txt"]
    for name in hostile:
        with open(os.path.join(device, name), "w") as f:
            f.write("hostile")
    wait(lambda: all(has_row(name) for name in hostile), "the hostile names' rows", 60)
    no_alert()
    text = driver.find_element(By.ID, "item-rows").text
    if any(name not in text for name in hostile):
        fail("markup in names did not show as text: %r" % text)
    if driver.find_elements(By.CSS_SELECTOR, "#item-rows img, #item-rows script"):
        fail("a name became an element")
    step("names with markup render as text")
    # A bidi override cannot pass for another name: the server refuses it (nothing is made),
    # and the page shows the name with the override as a visible code.
    bidi = os.path.join(work, "invoice\u202etxt.exe")
    with open(bidi, "w") as f:
        f.write("not an invoice")
    driver.find_element(By.ID, "upload-files").send_keys(bidi)
    wait(lambda: "failed" in driver.find_element(By.ID, "uploads").text, "the refused upload's message", 60)
    shown = driver.find_element(By.ID, "uploads").text
    if "invoice<U+202E>txt.exe" not in shown or "\u202e" in shown or "U+202E" not in shown.split("failed", 1)[1]:
        fail("the bidi override was not shown as a code: %r" % shown)
    if any("\u202e" in name for name in rows()):
        fail("an item with a bidi override was made")
    step("a name with a bidi override is refused and shown with the override visible")
    shot("folder.png")

    # CSRF: a request from the page without the session's token, and a form from another site, change nothing.
    status = driver.execute_script("""
        return fetch(arguments[0], {method: "POST", headers: {"X-Ubiquity-Web": "1", "Content-Type": "application/json"},
                     body: JSON.stringify({name: "forged"})}).then(r => r.status)""",
        "/web/api/containers/%s/folders" % container)
    if status != 403:
        fail("a change without the CSRF token was answered %s" % status)
    forged = os.path.join(work, "forged.html")
    with open(forged, "w") as f:
        f.write("""<form id=f method=post action="%s/web/api/containers/%s/folders" enctype="text/plain">
                   <input name='{"name":"forged-form","x":"' value='"}'></form><script>document.getElementById("f").submit()</script>"""
                % (url, container))
    driver.get("file://" + forged)
    time.sleep(2)
    driver.get(url + "/web/#/c/%s" % container)
    wait(lambda: has_row("Notes.txt"), "the container's documents again")
    if has_row("forged") or has_row("forged-form"):
        fail("a forged request made a folder")
    step("forged requests (no CSRF token; a form from another site) changed nothing")

    # Rename: the device follows.
    row_action("Holiday.mov", "Rename")
    answer_dialog("Holiday 2026.mov")
    eventually(lambda: os.path.exists(os.path.join(device, "Holiday 2026.mov")) and not os.path.exists(os.path.join(device, "Holiday.mov")),
               "the rename on the device", 60)
    step("renamed in the page, renamed on the device")

    # A conflict: another device (the phone, through the sync API) saved Notes.txt from an older version.
    # (The device seals names: the phone finds the item through the page, which opens them.)
    phone = v1("POST", "/v1/sign-in", body={"account": args["account"], "password": args["password"], "deviceName": "phone"})["token"]
    listed = driver.execute_script("return fetch(arguments[0], {headers: {'X-Ubiquity-Web': '1'}}).then(r => r.json())",
                                   "/web/api/containers/%s/folder" % container)["items"]
    notes = v1("GET", "/v1/containers/%s/items/%s" % (container, [item for item in listed if item["name"] == "Notes.txt"][0]["id"]), phone)
    older = [r["revision"] for r in v1("GET", "/v1/containers/%s/items/%s/revisions" % (container, notes["id"]), phone)["revisions"]
             if r["revision"] != notes["revision"]][0]
    phones = b"the phone's draft"
    digest_hex = hashlib.sha256(phones).hexdigest()
    v1("PUT", "/v1/chunks/" + digest_hex, phone, raw=phones)
    v1("PUT", "/v1/containers/%s/items/%s" % (container, notes["id"]), phone, body={
        "baseRevision": older, "name": "Notes.txt", "kind": "file", "modificationDate": time.time(),
        "manifest": {"chunks": [{"hash": digest_hex, "size": len(phones)}]}})
    wait(lambda: "1 conflict" in (row_text("Notes.txt") or ""), "the conflict in the page", 60)
    eventually(lambda: device_conflicts("Notes.txt") == 1, "the conflict version on the device", 60)
    step("a conflict shows in the page and as an NSFileVersion on the device")
    row_action("Notes.txt", "Versions")
    wait(lambda: driver.find_element(By.ID, "versions").is_displayed() and not driver.find_element(By.ID, "conflicts-part").get_attribute("hidden"),
         "the versions page with the conflict")
    shot("versions.png")
    keep = driver.execute_script("return document.querySelector('#conflict-rows tr:first-child button')")
    keep.click()
    wait(lambda: driver.find_element(By.ID, "conflicts-part").get_attribute("hidden") is not None, "the conflict gone from the page", 60)
    eventually(lambda: device_conflicts("Notes.txt") == 0, "the resolution on the device", 60)
    step("the conflict resolved in the page: the device's NSFileVersion has no unresolved conflict")

    # Delete, then recover from Recently Deleted.
    driver.get(url + "/web/#/c/%s" % container)
    wait(lambda: has_row("Welcome.txt"), "the container's documents after the versions page")
    row_action("Welcome.txt", "Delete")
    answer_dialog()
    eventually(lambda: not os.path.exists(os.path.join(device, "Welcome.txt")), "the deletion on the device", 60)
    driver.get(url + "/web/#/deleted")
    wait(lambda: driver.find_element(By.ID, "deleted").is_displayed() and "Welcome.txt" in driver.find_element(By.ID, "deleted-rows").text,
         "the deleted item in Recently Deleted", 60)
    shot("recently-deleted.png")
    driver.execute_script("return document.querySelector('#deleted-rows tr button')").click()
    eventually(lambda: os.path.exists(os.path.join(device, "Welcome.txt")) and open(os.path.join(device, "Welcome.txt")).read() == "hello",
               "the recovered file on the device", 60)
    step("deleted in the page, gone from the device; recovered, back on the device")
    driver.get(url + "/web/#/c/%s" % container)
    wait(lambda: has_row("Welcome.txt"), "the container's documents again")

    # Public links: one made on the device, one from the page; anyone can download, until revoked.
    published = device_publish("Notes.txt")
    if float(published["expires"]) < time.time() + 29 * 86400:
        fail("the device's link expires too soon: %r" % published)
    status, headers, body = fetch_link(published["url"])
    with open(os.path.join(device, "Notes.txt"), "rb") as f:
        if status != 200 or body != f.read():
            fail("the device's link answered %s %r" % (status, body[:100]))
    if not headers.get("Content-Disposition", "").startswith("attachment") or headers.get("X-Content-Type-Options") != "nosniff":
        fail("the link's download headers: %s" % dict(headers))
    step("a link published on the device downloads the file for anyone, as an attachment")
    row_action("Welcome.txt", "Share link")
    wait(lambda: driver.find_element(By.ID, "link-dialog").is_displayed() and driver.find_element(By.ID, "link-address").get_attribute("value"),
         "the shared link's dialog")
    shared = driver.find_element(By.ID, "link-address").get_attribute("value")
    shot("share-link.png")
    driver.execute_script("document.getElementById('link-dialog').close()")
    status, headers, body = fetch_link(shared)
    if status != 200 or body != b"hello":
        fail("the page's link answered %s %r" % (status, body[:100]))
    driver.get(url + "/web/#/links")
    wait(lambda: driver.find_element(By.ID, "links").is_displayed() and len(driver.find_elements(By.CSS_SELECTOR, "#link-rows tr")) == 2,
         "both links in Shared Links", 60)
    shot("shared-links.png")
    driver.execute_script("return [...document.querySelectorAll('#link-rows tr')].find(r => r.dataset.name === 'Notes.txt').querySelector('button')").click()
    wait(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#link-rows tr")) == 1, "the revoked link gone from the list", 60)
    if fetch_link(published["url"])[0] != 404 or fetch_link(shared)[0] != 200:
        fail("revoking one link did not end it alone")
    step("links listed in the page; the revoked one no longer downloads")

    # Manage Storage: the container and the laptop's key-value store (its app set a value, its
    # agent sealed it), the value as a property list (opened by the server's escrow).
    store = container
    driver.get(url + "/web/#/storage")
    wait(lambda: driver.find_element(By.ID, "storage").is_displayed() and container in driver.find_element(By.ID, "storage-rows").text
         and store in driver.find_element(By.ID, "kv-store-rows").text, "Manage Storage", 60)
    shot("manage-storage.png")
    driver.find_element(By.CSS_SELECTOR, "#kv-store-rows a").click()
    wait(lambda: driver.find_element(By.ID, "kv").is_displayed() and "<key>dark</key>" in driver.find_element(By.ID, "kv-rows").text
         and "theme <b>" in driver.find_element(By.ID, "kv-rows").text, "the key-value store's values", 60)
    step("Manage Storage lists the container and the key-value store; values show as property lists")

    # Devices: the laptop, the phone and this browser; the phone signed out from the page.
    driver.get(url + "/web/#/devices")
    wait(lambda: driver.find_element(By.ID, "devices").is_displayed() and "phone" in driver.find_element(By.ID, "device-rows").text, "the devices", 60)
    listed_devices = driver.execute_script("return [...document.querySelectorAll('#device-rows tr')].map(r => r.dataset.name)")
    if sorted(listed_devices) != sorted(["laptop", "phone", "Web browser"] + others):
        fail("the devices listed: %r" % listed_devices)
    # The account's data protection, as its roster says: the laptop set its keys up, and the
    # test's other devices joined by the escrow.
    wait(lambda: "Standard Data Protection" in driver.find_element(By.ID, "protection-summary").text, "the data protection", 20)
    key_devices = driver.execute_script("return [...document.querySelectorAll('#protection-devices li')].map(li => li.dataset.name)")
    if sorted(key_devices) != sorted(["laptop"] + others):
        fail("the devices holding the keys: %r" % key_devices)
    shot("devices.png")
    driver.execute_script("return [...document.querySelectorAll('#device-rows tr')].find(r => r.dataset.name === 'phone').querySelector('button')").click()
    answer_dialog()
    wait(lambda: "phone" not in driver.find_element(By.ID, "device-rows").text, "the phone gone from the list", 60)
    try:
        v1("GET", "/v1/account", phone)
        fail("the signed-out phone's token still works")
    except urllib.error.HTTPError as error:
        if error.code != 401:
            fail("the signed-out phone was answered %s" % error.code)
    step("a device signed out from the page can no longer sync")

    # The operator's page (the test made this account an operator): health, accounts, a quota set.
    driver.get(url + "/web/#/admin")
    wait(lambda: driver.find_element(By.ID, "admin").is_displayed() and "ok" in driver.find_element(By.ID, "health").text
         and "ada" in driver.find_element(By.ID, "account-rows").text, "the administration page")
    if not driver.find_element(By.ID, "nav-admin").is_displayed():
        fail("the administration link is not in the bar of an operator's page")
    shot("administration.png")
    driver.execute_script("return document.querySelector('#account-rows tr[data-name=\"ada\"] td:last-child button')").click()
    answer_dialog("12")
    wait(lambda: "12 GB" in driver.find_element(By.ID, "account-rows").text, "the new quota in the accounts' table")
    step("the operator's page shows the server's health and the accounts; a quota set there holds")

    # Delete All, confirmed by typing the container's name: the device's documents go; Recover all brings them back.
    before_all = sorted(os.listdir(device))
    driver.get(url + "/web/#/storage")
    wait(lambda: container in driver.find_element(By.ID, "storage-rows").text, "Manage Storage again")
    driver.find_element(By.CSS_SELECTOR, "#storage-rows button").click()
    wait(lambda: driver.find_element(By.ID, "delete-all-dialog").is_displayed(), "the Delete All dialog")
    if driver.find_element(By.ID, "delete-all-button").is_enabled():
        fail("Delete All was possible without typing the container's name")
    driver.find_element(By.ID, "delete-all-confirm").send_keys(container)
    driver.find_element(By.ID, "delete-all-button").click()
    eventually(lambda: [name for name in os.listdir(device) if not name.startswith(".")] == [], "the device's documents gone", 120)
    step("Delete All (typed confirmation) removed the documents from the device")
    driver.get(url + "/web/#/deleted")
    wait(lambda: driver.find_element(By.ID, "deleted").is_displayed() and "Holiday 2026.mov" in driver.find_element(By.ID, "deleted-rows").text,
         "everything in Recently Deleted", 60)
    driver.find_element(By.ID, "recover-all").click()
    eventually(lambda: sorted(n for n in os.listdir(device) if not n.startswith(".")) == [n for n in before_all if not n.startswith(".")],
               "every document back on the device", 120)
    eventually(lambda: os.path.exists(os.path.join(device, "Holiday 2026.mov")) and digest(os.path.join(device, "Holiday 2026.mov")) == digest(big),
               "the large file back on the device byte for byte", 120)
    step("Recover all brought every document back to the device")
    driver.get(url + "/web/#/c/%s" % container)
    wait(lambda: has_row("Welcome.txt"), "the container's documents after recovering")

    # A phone-width window in dark mode.
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    driver.set_window_size(390, 844)
    time.sleep(0.3)
    shot("folder-phone-dark.png")
    width = driver.execute_script("return document.documentElement.scrollWidth")
    if width > 400:
        fail("the folder page is %d px wide on a 390 px window" % width)
    step("usable at phone width, in dark mode")

    # Signing out ends the session: the page asks to sign in again, the old cookie opens nothing.
    driver.set_window_size(1280, 900)
    driver.find_element(By.ID, "sign-out").click()
    wait(lambda: driver.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form after signing out")
    request = urllib.request.Request(url + "/web/api/session", headers={"Cookie": "__Host-ubiquity=" + session["value"]})
    try:
        urllib.request.urlopen(request)
        fail("the signed-out session still opens the account")
    except urllib.error.HTTPError as error:
        if error.code != 401:
            fail("the signed-out session was answered %s" % error.code)
    step("signing out ends the session")
except Exception:  # a step that raised (not one that failed its check): said with where it was
    fail("the step after the last \"ok\" raised:\n" + traceback.format_exc())
finally:
    driver.quit()
print("all steps held", flush=True)
