#!/usr/bin/env python3
"""The encrypted format in a real browser (Chromium through Selenium): the page's sealed.js opens
chunks a device sealed, refuses a changed one, seals chunks a device then opens, and times the
opening of MIB MiB of 128 KiB chunks (sequentially and eight at a time).

Argument (JSON on the command line): url (a server's base), fixture (a JSON file: root, epoch,
container, chunks [{id, body}] in base64), mib.
Prints one JSON line: {opened: [sha256 hex …], refused, mine: [{id, body, sha256}], sequentialMs, parallelMs, mib}
or {error}.
"""

import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

args = json.loads(sys.argv[1])
with open(args["fixture"]) as handle:
    fixture = json.load(handle)

options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]:
    options.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
try:
    driver.set_script_timeout(600)
    driver.get(args["url"] + "/web/")
    result = driver.execute_async_script("""
        const [fixture, mib, done] = arguments;
        import("/web/assets/sealed.js").then(async (m) => {
          const bytes = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
          const hex = (array) => [...array].map((x) => x.toString(16).padStart(2, "0")).join("");
          const base64 = (array) => { let text = ""; for (let i = 0; i < array.length; i += 0x8000) text += String.fromCharCode(...array.subarray(i, i + 0x8000)); return btoa(text); };
          const sha256 = async (array) => hex(new Uint8Array(await crypto.subtle.digest("SHA-256", array)));
          const random = (size) => { const array = new Uint8Array(size); for (let i = 0; i < size; i += 65536) crypto.getRandomValues(array.subarray(i, i + 65536)); return array; };
          const keys = await m.chunkKeys(bytes(fixture.root), fixture.epoch, fixture.container);
          const opened = [];
          for (const chunk of fixture.chunks) opened.push(await sha256(await m.openChunk(keys, bytes(chunk.id), bytes(chunk.body))));
          const changed = bytes(fixture.chunks[0].body);
          changed[changed.length - 1] ^= 1;
          let refused = "";
          try { await m.openChunk(keys, bytes(fixture.chunks[0].id), changed); } catch (error) { refused = error.message; }
          const mine = [];
          for (const size of [0, 1, 5000, 200000]) {
            const plaintext = random(size);
            const sealed = await m.sealChunk(keys, plaintext);
            mine.push({ id: base64(sealed.id), body: base64(sealed.body), sha256: await sha256(plaintext) });
          }
          const chunks = [];
          for (let i = 0; i < mib * 8; i++) chunks.push(await m.sealChunk(keys, random(131072)));
          let start = performance.now();
          for (const chunk of chunks) await m.openChunk(keys, chunk.id, chunk.body);
          const sequentialMs = performance.now() - start;
          start = performance.now();
          for (let i = 0; i < chunks.length; i += 8) await Promise.all(chunks.slice(i, i + 8).map((chunk) => m.openChunk(keys, chunk.id, chunk.body)));
          const parallelMs = performance.now() - start;
          done({ opened, refused, mine, sequentialMs, parallelMs, mib });
        }).catch((error) => done({ error: String(error) }));
    """, fixture, args["mib"])
    print(json.dumps(result))
finally:
    driver.quit()
