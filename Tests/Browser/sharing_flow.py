#!/usr/bin/env python3
"""Sharing in a real browser (Chromium through Selenium; docs/Sharing.md): Ada shares a folder
from the page with Bob and with a name nobody has (answered alike), then Bob signs in, accepts
the invitation under Shared with Others, opens the folder and downloads a file of it; what Ada
did not share is not reached from Bob's session. SharedWebTests runs it and reads its verdict.

Arguments (JSON on the command line): url, container, folder (the shared folder's name), file
(a file in it) and text (its contents), secret (the id of an item of Ada's outside the folder),
work (a scratch folder), screenshots (where the pictures go).

Prints one line per step ("ok: …") and "all steps held" at the end, exit 0; on the first step
that did not hold, "FAILED: …" with what the page showed, exit 1.
"""

import json
import os
import sys

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(__file__))
from browser_support import Waiting, chromium  # noqa: E402

args = json.loads(sys.argv[1])
url, container, folder, work, shots = args["url"], args["container"], args["folder"], args["work"], args["screenshots"]
os.makedirs(work, exist_ok=True)
os.makedirs(shots, exist_ok=True)
driver = chromium(os.path.join(work, "downloads"))
driver.set_window_size(1200, 800)
waiting = Waiting()


def step(text):
    print("ok: " + text, flush=True)


def fail(text):
    print("FAILED: " + text, flush=True)
    try:
        print("page: " + driver.find_element(By.TAG_NAME, "body").text[:2000], flush=True)
        driver.save_screenshot(os.path.join(work, "failure.png"))
    except Exception as error:  # the browser itself may be the failure
        print("no page: %r" % error, flush=True)
    sys.exit(1)


def until(check, what, seconds=60):
    try:
        return waiting.until(check, what, seconds)
    except TimeoutError as error:
        fail(str(error))


def shot(name):
    """A screenshot for docs/screenshots (without a passing status message)."""
    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.save_screenshot(os.path.join(shots, name))


def js(script, *arguments):
    return driver.execute_script(script, *arguments)


def sign_in(account):
    driver.get(url + "/web/")
    until(lambda: driver.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "account").send_keys(account)
    driver.find_element(By.ID, "password").send_keys("correct horse")
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    until(lambda: driver.find_element(By.ID, "sign-out").is_displayed(), account + " signed in")


def status_of(path):
    """The HTTP status of a GET the page makes (its session's cookie)."""
    return js("return fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.status)", path)


try:
    # Ada shares the folder from its row's actions, with Bob and with a name nobody has.
    sign_in("ada")
    driver.get(url + "/web/#/c/" + container)
    row = "[...document.querySelectorAll('#item-rows tr')].find(r => r.dataset.name === arguments[0])"
    until(lambda: js("return !!(" + row + ")", folder), "the folder's row")
    js(row + ".querySelector('details summary').click()", folder)
    until(lambda: js("const b = [..." + row + ".querySelectorAll('details button')].find(b => b.textContent.startsWith('Share with people')); if (b) b.click(); return !!b", folder),
          "the Share action")
    until(lambda: driver.find_element(By.ID, "share-dialog").is_displayed(), "the Share dialog")
    for name in ["bob", "nobody"]:
        driver.find_element(By.ID, "share-name").send_keys(name)
        driver.find_element(By.ID, "share-invite").click()
        until(lambda: js("return !!document.querySelector('#share-people li[data-name=\"' + arguments[0] + '\"]')", name), name + " in the people list")
        until(lambda: driver.find_element(By.ID, "share-name").get_attribute("value") == "", "the name field cleared")
    error = driver.find_element(By.ID, "share-error").text
    if error:
        fail("the dialog said: " + error)
    people = js("return [...document.querySelectorAll('#share-people li')].map(li => li.innerText)")
    if not (any("bob" in p and "invited" in p for p in people) and any("nobody" in p and "invited" in p for p in people)):
        fail("an absent name is shown as any invitation: %r" % people)
    shot("sharing-dialog.png")
    step("Ada invited bob and a name nobody has, answered alike: %r" % people)
    driver.find_element(By.CSS_SELECTOR, "#share-form button[value=done]").click()
    until(lambda: not driver.find_element(By.ID, "share-dialog").is_displayed(), "the dialog closed")
    driver.get(url + "/web/#/shared")
    until(lambda: js("return [...document.querySelectorAll('#owned-rows tr')].some(r => r.dataset.name === arguments[0] && r.innerText.includes('bob'))", folder),
          "the folder under Shared by me")
    step("Shared by me lists the folder and its people")
    driver.find_element(By.ID, "sign-out").click()
    until(lambda: driver.find_element(By.ID, "sign-in").is_displayed(), "signed out")

    # Bob accepts under Shared with Others, opens the folder, downloads the file.
    sign_in("bob")
    driver.get(url + "/web/#/shared")
    until(lambda: js("return [...document.querySelectorAll('#invitation-rows tr')].some(r => r.dataset.name === arguments[0] && r.innerText.includes('ada'))", folder),
          "Ada's invitation")
    shot("sharing-invitation.png")
    driver.find_element(By.CSS_SELECTOR, "#invitation-rows button[aria-label='Accept %s']" % folder).click()
    until(lambda: js("return [...document.querySelectorAll('#joined-rows tr')].some(r => r.dataset.name === arguments[0])", folder), "the folder under Shared with me")
    step("Bob accepted the invitation")
    js("[...document.querySelectorAll('#joined-rows tr')].find(r => r.dataset.name === arguments[0]).querySelector('a').click()", folder)
    until(lambda: js("return [...document.querySelectorAll('#share-item-rows tr')].some(r => r.dataset.name === arguments[0])", args["file"]), "the shared folder's file")
    shot("shared-with-me.png")
    href = js("return [...document.querySelectorAll('#share-item-rows tr')].find(r => r.dataset.name === arguments[0]).querySelector('a').href", args["file"])
    text = js("return fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.text())", href)
    if text != args["text"]:
        fail("the download said %r" % text)
    step("Bob downloaded the shared file")

    # What Ada did not share is not reached from Bob's session: not by its id in his own
    # container, not through the share.
    share = js("return location.hash.split('/')[2]")
    for path in ["/web/api/containers/%s/items/%s/download" % (container, args["secret"]),
                 "/web/api/shares/%s/items/%s/download" % (share, args["secret"]),
                 "/web/api/shares/%s/items/%s" % (share, args["secret"])]:
        status = status_of(path)
        if status != 404:
            fail("%s answered %s" % (path, status))
    step("Ada's item outside the share is answered as one that does not exist")
    print("all steps held", flush=True)
except SystemExit:
    raise
except Exception as error:  # what went wrong, with the page
    fail("%r" % error)
finally:
    driver.quit()
