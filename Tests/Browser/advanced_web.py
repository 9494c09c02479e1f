#!/usr/bin/env python3
"""The web under Advanced Data Protection in a real browser (Chromium through Selenium): the
page signs in, finds the server cannot open the container, asks the account's devices for its
keys and shows a code; the test types that code on a device (`ubiquity devices approve CODE`);
the page then lists the folder with the names it opened itself and downloads a file, opening
its chunks itself.

It lists the file's versions (their records opened in the page), downloads the earlier one and
restores it (a change it seals and signs); it resolves a conflict of `conflicted`, keeping the
conflict version (the resolution signed with its key).

Then the page makes changes of its own, as a device does: a new folder, a file renamed and moved
into it, a folder made and deleted, a file uploaded, a folder uploaded.

Argument (JSON on the command line): url, account, password, container, code (a file the code is
written to), downloads (a folder), file (the name to download), rename (a file the page renames
to `renamed` and moves into its new folder), conflicted (a file with a conflict version), upload (a file's path the page uploads), tree (a folder's path the page uploads).
Prints one JSON line: {code, names, downloaded (the file's bytes, base64), versions (how many
the page listed), earlier (the earlier version's bytes, base64), keptFrom (the device whose
version of the conflict it kept), changed (the names listed after
the changes), …} or {error, step}.
"""

import base64
import json
import os
import sys
import time

from selenium.common.exceptions import ElementNotInteractableException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from browser_support import Waiting, chromium

args = json.loads(sys.argv[1])
driver = chromium(args["downloads"])
said = []  # what the page's status line said meanwhile (it clears itself)


def note_status():
    try:
        text = driver.find_element(By.ID, "status").text
        if text and (not said or said[-1] != text):
            said.append(text)
    except Exception:
        pass


waiting = Waiting(note_status)
eventually = waiting.until

ROW = "const r = [...document.querySelectorAll('#item-rows tr')].find(r => r.dataset.name === arguments[0]);"


def row_action(name, label):
    """Opens the row's actions menu and clicks the action whose label starts with `label`."""
    def find():
        try:
            action = driver.execute_script(ROW + """if (!r) return null; const menu = r.querySelector('details');
                if (!menu.open) menu.querySelector('summary').click();
                return [...r.querySelectorAll('details button')].find(b => b.textContent.startsWith(arguments[1])) || null;""", name, label)
            if action is not None:
                action.click()
                return True
        except (StaleElementReferenceException, ElementNotInteractableException):
            pass
        return None
    eventually(find, "the action %s of %s" % (label, name))


def press(element_id, what):
    """Clicks the element once it can be clicked (a page still drawing a folder, or a dialog
    still closing, answers "not interactable" for a moment under load)."""
    def attempt():
        driver.find_element(By.ID, element_id).click()
        return True
    eventually(attempt, what)


def answer_dialog(text=None):
    """Accepts the page's confirm or prompt (typing `text` into a prompt)."""
    alert = WebDriverWait(driver, 10).until(lambda d: d.switch_to.alert)
    if text is not None:
        alert.send_keys(text)
    alert.accept()


def names_shown():
    return sorted(row.get_attribute("data-name") for row in driver.find_elements(By.CSS_SELECTOR, "#item-rows tr"))


try:
    driver.get(args["url"] + "/web/")
    eventually(lambda: driver.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form")
    driver.find_element(By.ID, "account").send_keys(args["account"])
    driver.find_element(By.ID, "password").send_keys(args["password"])
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
    eventually(lambda: driver.find_element(By.ID, "containers").is_displayed(), "the containers")
    driver.get(args["url"] + "/web/#/c/" + args["container"])
    code = eventually(lambda: (lambda text: text if text[:4].isdigit() else None)(driver.find_element(By.ID, "approval-code").text), "the code to type on a device")
    device = driver.find_element(By.ID, "approval-device").text
    with open(args["code"], "w") as handle:
        handle.write(code)
    eventually(lambda: driver.find_element(By.ID, "folder").is_displayed() and not driver.find_element(By.ID, "approval").is_displayed(), "the folder, opened", 120)
    rows = eventually(lambda: driver.find_elements(By.CSS_SELECTOR, "#item-rows tr"), "the folder's rows")
    names = [row.get_attribute("data-name") for row in rows]
    driver.find_element(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["file"]).click()
    target = os.path.join(args["downloads"], args["file"])
    eventually(lambda: os.path.exists(target) and not os.path.exists(target + ".crdownload") and os.path.getsize(target) > 0, "the download", 120)
    time.sleep(0.5)
    with open(target, "rb") as handle:
        downloaded = base64.b64encode(handle.read()).decode()
    os.remove(target)

    # The page shares the file as a device does (it seals the link's manifest with the keys it
    # was given); the link, key after "#", opens in the browser and downloads the same bytes.
    row_action(args["file"], "Share link")
    link = eventually(lambda: driver.find_element(By.ID, "link-address").get_attribute("value"), "the shared link", 60)
    driver.get(link)
    eventually(lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("ready", "failed"), "the link's page")
    if driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") != "ready":
        raise RuntimeError("the shared link did not open: " + driver.find_element(By.ID, "link-error").text)
    press("link-download", "the link's download button")
    eventually(lambda: os.path.exists(target) and not os.path.exists(target + ".crdownload") and os.path.getsize(target) > 0, "the shared link's download", 120)
    time.sleep(0.5)
    with open(target, "rb") as handle:
        shared = base64.b64encode(handle.read()).decode()
    os.remove(target)
    driver.get(args["url"] + "/web/#/c/" + args["container"])
    eventually(lambda: driver.find_elements(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["file"]), "the folder after the link")

    # The file's versions, their records opened in the page: the earlier one downloaded, then
    # restored (its contents under a new record the page seals, the change signed).
    row_action(args["file"], "Versions")
    eventually(lambda: driver.find_element(By.ID, "versions").is_displayed(), "the versions page", 60)
    version_rows = eventually(lambda: (lambda rows: rows if len(rows) >= 2 else None)(driver.find_elements(By.CSS_SELECTOR, "#version-rows tr")),
                              "the file's versions", 60)
    versions = len(version_rows)
    oldest = version_rows[-1].get_attribute("data-revision")
    VERSION = "const r = [...document.querySelectorAll('#version-rows tr')].find(r => r.dataset.revision === arguments[0]);"

    def version_button(label):
        found = driver.execute_script(VERSION + "return r ? [...r.querySelectorAll('button')].find(b => b.textContent === arguments[1]) || null : null;",
                                      oldest, label)
        if found is not None:
            found.click()
            return True
        return None
    eventually(lambda: version_button("Download"), "the earlier version's download button")
    eventually(lambda: os.path.exists(target) and not os.path.exists(target + ".crdownload") and os.path.getsize(target) > 0, "the earlier version", 120)
    time.sleep(0.5)
    with open(target, "rb") as handle:
        earlier = base64.b64encode(handle.read()).decode()
    os.remove(target)
    said.clear()
    eventually(lambda: version_button("Restore"), "the earlier version's restore button")
    eventually(lambda: next((text for text in said if text.startswith("Restored")), None), "the earlier version restored", 120)
    driver.get(args["url"] + "/web/#/c/" + args["container"])
    eventually(lambda: driver.find_elements(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["file"]), "the folder after the versions")

    # A conflict (a file changed on both devices): the page keeps the conflict version, as a
    # device would, and signs the resolution with its key.
    row_action(args["conflicted"], "Versions")
    eventually(lambda: driver.find_element(By.ID, "versions").is_displayed() and driver.find_element(By.ID, "conflicts-part").is_displayed(), "the conflict", 60)
    said.clear()
    kept_from = eventually(lambda: driver.execute_script("""const r = document.querySelectorAll('#conflict-rows tr')[1]; if (!r) return null;
        const keep = [...r.querySelectorAll('button')].find(b => b.textContent === 'Keep this version'); if (!keep) return null;
        const device = r.children[1].textContent; keep.click(); return device;"""), "the conflict version's keep button", 60)
    eventually(lambda: next((text for text in said if text.startswith("Conflict resolved")), None), "the conflict resolved", 120)
    driver.get(args["url"] + "/web/#/c/" + args["container"])
    eventually(lambda: driver.find_elements(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["conflicted"]), "the folder after the resolution")

    # The page's own changes (it seals their records, tags their names and signs what they made
    # with its key, which the laptop let into the roster): a new folder, a file renamed and moved
    # into it, another folder made and deleted.
    press("new-folder", "the new-folder button")
    answer_dialog("Made in the page")
    eventually(lambda: "Made in the page" in names_shown(), "the new folder listed")
    row_action(args["rename"], "Rename")
    answer_dialog(args["renamed"])
    eventually(lambda: args["renamed"] in names_shown() and args["rename"] not in names_shown(), "the file renamed")
    row_action(args["renamed"], "Move")
    eventually(lambda: driver.find_element(By.ID, "move-dialog").is_displayed(), "the move dialog")
    Select(driver.find_element(By.ID, "move-target")).select_by_visible_text("Made in the page")
    press("move-confirm", "the move dialog's button")
    eventually(lambda: args["renamed"] not in names_shown(), "the file moved away")
    press("new-folder", "the new-folder button")
    answer_dialog("Doomed")
    eventually(lambda: "Doomed" in names_shown(), "the second folder listed")
    row_action("Doomed", "Delete")
    answer_dialog()
    eventually(lambda: "Doomed" not in names_shown(), "the second folder deleted")
    # An upload: the page cuts the file, names and seals each chunk, seals its record, signs it.
    driver.find_element(By.ID, "upload-files").send_keys(args["upload"])
    eventually(lambda: os.path.basename(args["upload"]) in names_shown(), "the uploaded file listed", 120)
    # A folder uploaded: the page makes its folders too (sealed, signed), then its files.
    driver.find_element(By.ID, "upload-folder").send_keys(args["tree"])
    eventually(lambda: os.path.basename(args["tree"]) in names_shown(), "the uploaded folder listed", 120)
    changed = names_shown()
    # The server serves another chunk list for the file (here none): the page refuses it, as it
    # is not the one the record names, and saves nothing.
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        const listFetch = window.fetch;
        window.fetch = async (input, init) => {
          const response = await listFetch(input, init);
          if (String(input).includes("/sealed/items/") && response.ok) {
            const item = await response.json();
            item.manifest.chunks = [];
            return new Response(JSON.stringify(item), { status: 200, headers: { "Content-Type": "application/json" } });
          }
          return response;
        };"""})
    said.clear()
    driver.refresh()
    eventually(lambda: driver.find_elements(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["file"]), "the folder again")
    driver.find_element(By.CSS_SELECTOR, '#item-rows tr[data-name="%s"] a' % args["file"]).click()
    swapped = eventually(lambda: next((text for text in said if "chunk list" in text), None), "another chunk list refused", 60)
    time.sleep(1)
    saved = os.path.exists(target)

    # The server changes the grant it keeps (one byte): reloaded, the page refuses it and opens nothing.
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        const realFetch = window.fetch;
        window.fetch = async (input, init) => {
          const response = await realFetch(input, init);
          if (String(input).endsWith("/web/api/grant") && response.ok) {
            const grant = await response.json();
            const body = Uint8Array.from(atob(grant.body), (c) => c.charCodeAt(0));
            body[body.length - 1] ^= 1;
            grant.body = btoa(String.fromCharCode(...body));
            return new Response(JSON.stringify(grant), { status: 200, headers: { "Content-Type": "application/json" } });
          }
          return response;
        };"""})
    said.clear()
    driver.refresh()
    refused = eventually(lambda: next((text for text in said if "not signed" in text), None), "the changed grant refused", 60)
    opened = driver.find_element(By.ID, "folder").is_displayed()
    print(json.dumps({"code": code, "device": device, "names": names, "downloaded": downloaded, "link": link, "shared": shared,
                      "versions": versions, "earlier": earlier, "keptFrom": kept_from,
                      "swapped": swapped, "savedSwapped": saved, "changed": changed,
                      "refused": refused, "openedAfterChange": opened}))
except Exception as error:
    status = ""
    try:
        status = driver.find_element(By.ID, "status").text
    except Exception:
        pass
    print(json.dumps({"error": str(error), "step": waiting.step, "status": status, "said": said}))
finally:
    driver.quit()
