// The web under Advanced Data Protection (docs/Encryption.md, "The web under Advanced"): the
// server holds no key, so this page asks one of the account's devices for the keys of the
// containers, as a new device asks to join — it commits to a nonce, a device answers, it
// reveals, and shows a code the person types on that device (`ubiquity devices approve CODE`).
// The device seals the keys to this browser's X25519 key and signs them; the page checks the
// signature against the device's key the code was made from, opens the keys (WebCrypto), and
// opens every record and chunk itself. The keys live in this page only, for an hour at most;
// the browser's own key pair stays in IndexedDB, not extractable.

import { api, APIError, segment } from "./api.js";
import { applyPatch, binding, concat, openChunk, pad, sealChunk, u32 } from "./sealed.js";

const subtle = crypto.subtle;
const encoder = new TextEncoder();
const $ = (id) => document.getElementById(id);

// The keys this page holds: { expires, byContainer: { container: { epoch: keys } } }.
let granted = null;

/** Base64 of any length of bytes (a spread of a large array would overflow the stack). */
function base64(bytes) {
  let text = "";
  for (let at = 0; at < bytes.length; at += 0x8000) text += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  return btoa(text);
}
const unbase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
const hexBytes = (hex) => Uint8Array.from(hex.match(/../g).map((pair) => parseInt(pair, 16)));
const sha256 = async (bytes) => new Uint8Array(await subtle.digest("SHA-256", bytes));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// MARK: This browser's keys (IndexedDB: the private halves are not extractable)

function database() {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open("ubiquity-browser-keys", 1);
    open.onupgradeneeded = () => open.result.createObjectStore("keys");
    open.onsuccess = () => resolve(open.result);
    open.onerror = () => reject(open.error);
  });
}

async function stored(name, value) {
  const db = await database();
  return new Promise((resolve, reject) => {
    const store = db.transaction("keys", value === undefined ? "readonly" : "readwrite").objectStore("keys");
    const request = value === undefined ? store.get(name) : store.put(value, name);
    request.onsuccess = () => resolve(value === undefined ? request.result : value);
    request.onerror = () => reject(request.error);
  });
}

/** This session's key pair (made once per web session), with its public halves' bytes. */
async function browserKeys(session) {
  const kept = await stored("session:" + session.device);
  if (kept && kept.signing) return kept;
  const agreement = await subtle.generateKey({ name: "X25519" }, false, ["deriveBits"]);
  const signing = await subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
  const keys = {
    agreement, signing, signingPublic: new Uint8Array(await subtle.exportKey("raw", signing.publicKey)),
    agreementPublic: new Uint8Array(await subtle.exportKey("raw", agreement.publicKey)), approver: null,
  };
  return stored("session:" + session.device, keys);
}

/** Forgets this session's key pair: a browser's key is let into the roster once, so the next
 * approval is of new keys. */
async function forgetBrowserKeys(session) {
  await stored("session:" + session.device, null);
}

// MARK: The code (as `JoinCode` computes it)

function commitment(nonce, keys) {
  return sha256(binding("join commitment", 1, 0, [nonce, keys.signingPublic, keys.agreementPublic]));
}

async function joinCode(approver, keys, approverNonce, nonce) {
  const digest = await sha256(binding("join code", 1, 0, [approver.signing, approver.agreement, keys.signingPublic, keys.agreementPublic, approverNonce, nonce]));
  let number = 0n;
  for (const byte of digest.subarray(0, 8)) number = (number << 8n) | BigInt(byte);
  const digits = (number % 100000000n).toString().padStart(8, "0");
  return digits.slice(0, 4) + " " + digits.slice(4);
}

// MARK: The grant

/** Opens the device's grant: its signature by the approving device first, then the seal. */
async function openGrant(grant, keys, session) {
  const body = unbase64(grant.body), signature = unbase64(grant.signature);
  const approverKey = await subtle.importKey("raw", keys.approver.signing, { name: "Ed25519" }, false, ["verify"]);
  if (!await subtle.verify({ name: "Ed25519" }, approverKey, signature, binding("web grant signature", 1, 0, [body]))) {
    throw new Error("the keys given to this browser are not signed by the device that approved it");
  }
  if (body.length <= 1 + 32 + 12 + 16 || body[0] !== 1) throw new Error("the keys given to this browser are of a format this page does not read");
  const ephemeral = body.subarray(1, 33);
  const peer = await subtle.importKey("raw", ephemeral, { name: "X25519" }, false, []);
  const shared = new Uint8Array(await subtle.deriveBits({ name: "X25519", public: peer }, keys.agreement.privateKey, 256));
  const base = await subtle.importKey("raw", shared, "HKDF", false, ["deriveBits"]);
  const bits = await subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: concat(ephemeral, keys.agreementPublic), info: encoder.encode("ubiquity web grant") }, base, 256);
  const key = await subtle.importKey("raw", bits, "AES-GCM", false, ["decrypt"]);
  const aad = binding("web grant", 1, 0, [encoder.encode(session.identity), keys.signingPublic, keys.agreementPublic, keys.approver.signing]);
  let plaintext;
  try {
    plaintext = new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: body.subarray(33, 45), additionalData: aad }, key, body.subarray(45)));
  } catch {
    throw new Error("the keys given to this browser do not open: changed, or sealed to another browser or account");
  }
  const contents = JSON.parse(new TextDecoder().decode(plaintext));
  if (contents.v !== 1 || contents.a !== session.identity) throw new Error("the keys given to this browser are for another account");
  const byContainer = {};
  for (const entry of contents.k) {
    (byContainer[entry.c] ||= {})[entry.e] = {
      record: unbase64(entry.r), nameTag: unbase64(entry.n), chunkIdentifier: unbase64(entry.i), chunkContent: unbase64(entry.k),
    };
  }
  // Where the roster let this browser's key in (under Advanced): what its commits name.
  const rosterEntry = contents.s ? { index: contents.s.i, hash: unbase64(contents.s.h) } : null;
  return { expires: contents.x, byContainer, rosterEntry, browser: keys };
}

/** The keys of this session, asking a device for them (and showing the code) when it has none. */
async function keysOf(session) {
  if (granted && granted.expires * 1000 > Date.now()) return granted;
  granted = null;
  let keys = await browserKeys(session);
  if (keys.approver) {
    try {
      granted = await openGrant(await api("GET", "/web/api/grant"), keys, session);
      return granted;
    } catch (error) {
      if (!(error instanceof APIError && error.code === "noGrant")) throw error;
      // The approval ended: new keys ask again (the roster lets each browser key in once).
      await forgetBrowserKeys(session);
      keys = await browserKeys(session);
    }
  }
  const nonce = crypto.getRandomValues(new Uint8Array(32));
  const request = await api("POST", "/web/api/approval", {
    signing: base64(keys.signingPublic), agreement: base64(keys.agreementPublic), commitment: base64(await commitment(nonce, keys)),
  });
  $("approval").hidden = false;
  $("approval-code").textContent = "…";
  $("approval-device").textContent = "a device of the account (its agent answers at once)";
  try {
    let state;
    for (;;) {
      state = await api("GET", "/web/api/approval/" + segment(request.id));
      if (state.approver) break;
      await sleep(1000);
    }
    const approver = { id: state.approver.id, name: state.approver.name, signing: unbase64(state.approver.signing), agreement: unbase64(state.approver.agreement) };
    await api("POST", `/web/api/approval/${segment(request.id)}/reveal`, { nonce: base64(nonce) });
    const code = await joinCode(approver, keys, unbase64(state.request.answerNonce), nonce);
    $("approval-code").textContent = code;
    $("approval-device").textContent = approver.name;
    keys.approver = approver;
    await stored("session:" + session.device, keys);
    for (;;) {
      try {
        granted = await openGrant(await api("GET", "/web/api/grant"), keys, session);
        return granted;
      } catch (error) {
        if (!(error instanceof APIError && error.code === "noGrant")) throw error;
      }
      await sleep(1000);
    }
  } finally {
    $("approval").hidden = true;
  }
}

// MARK: Records and chunks

async function openRecord(keys, container, item) {
  const sealed = unbase64(item.record);
  if (sealed.length < 5 + 12 + 16 || sealed[0] !== 1) throw new Error("the record of an item is of a format this page does not read");
  const epoch = new DataView(sealed.buffer, sealed.byteOffset + 1, 4).getUint32(0);
  const epochKeys = keys.byContainer[container]?.[epoch];
  if (!epochKeys) throw new Error("the record of an item is sealed in an epoch this browser was not given");
  const key = await subtle.importKey("raw", epochKeys.record, "AES-GCM", false, ["decrypt"]);
  const aad = binding("record", 1, epoch, [encoder.encode(container), encoder.encode(item.id), encoder.encode(item.parent || ""), new Uint8Array(0)]);
  let padded;
  try {
    padded = new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: sealed.subarray(5, 17), additionalData: aad }, key, sealed.subarray(17)));
  } catch {
    throw new Error("the record of an item does not open: the server changed or moved it");
  }
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end--;
  if (end < 0 || padded[end] !== 0x80) throw new Error("the record of an item is malformed");
  return JSON.parse(new TextDecoder().decode(padded.subarray(0, end)));
}

/** The container's items, opened (every page of its changes). */
async function openedItems(session, container) {
  const keys = await keysOf(session);
  const items = new Map();
  let since = 0;
  for (;;) {
    const page = await api("GET", `/web/api/containers/${segment(container)}/sealed/changes?since=${since}`);
    for (const item of page.items) {
      if (item.deleted) { items.delete(item.id); continue; }
      const record = item.record ? await openRecord(keys, container, item) : null;
      items.set(item.id, {
        id: item.id, parent: item.parent || null, kind: item.kind, sealed: Boolean(item.record),
        name: record ? record.n : item.name, size: record ? record.s : item.size, modificationDate: record ? record.d : item.modificationDate,
        deviceName: item.deviceName, uploaded: item.uploaded, conflicts: (item.conflicts || []).length,
      });
    }
    if (!page.more || page.items.length === 0) break;
    since = page.items[page.items.length - 1].sequence;
  }
  return items;
}

/** A folder's listing as the server's own looks (`items`, `path`, `total`), opened here. */
export async function sealedListing(session, container, folder, sort, filter) {
  const items = await openedItems(session, container);
  const path = [];
  for (let at = folder; at && items.has(at); at = items.get(at).parent) path.unshift({ id: at, name: items.get(at).name });
  const needle = (filter || "").toLowerCase();
  const shown = [...items.values()].filter((item) => item.parent === (folder || null) && (!needle || item.name.toLowerCase().includes(needle)));
  const order = {
    name: (a, b) => a.name.localeCompare(b.name), date: (a, b) => b.modificationDate - a.modificationDate, size: (a, b) => b.size - a.size,
  }[sort] || ((a, b) => a.name.localeCompare(b.name));
  shown.sort((a, b) => (a.kind === "directory") !== (b.kind === "directory") ? (a.kind === "directory" ? -1 : 1) : order(a, b));
  return { items: shown, path, total: shown.length, sealed: true };
}

const hex = (bytes) => [...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("");

/** Unsigned LEB128 numbers (a record's chunk sizes). */
function leb128(bytes) {
  const values = [];
  let value = 0, shift = 0;
  for (const byte of bytes) {
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if ((byte & 0x80) === 0) { values.push(value); value = 0; shift = 0; }
    else if (shift > 49) throw new Error("a record's chunk sizes are malformed");
  }
  if (shift !== 0) throw new Error("a record's chunk sizes are malformed");
  return values;
}

const same = (a, b) => a.length === b.length && a.every((byte, index) => byte === b[index]);

/** The plaintext of chunk `hash`: stored in plaintext (it hashes to its name), sealed, or as a
 * sealed patch of another chunk (made from that one, `depth` patches down so far). */
async function chunkPlaintext(keys, container, hash, depth = 0) {
  const response = await fetch(`/web/api/containers/${segment(container)}/sealed/chunks/${hash}`, { credentials: "same-origin", cache: "no-store" });
  if (!response.ok) throw new Error("a chunk of the file cannot be fetched (" + response.status + ")");
  const body = new Uint8Array(await response.arrayBuffer());
  const id = hexBytes(hash);
  if (same(await sha256(body), id)) return body;
  if (body.length < 5 + 12 + 16) throw new Error("a chunk of the file is malformed");
  const epoch = new DataView(body.buffer, body.byteOffset + 1, 4).getUint32(0);
  const epochKeys = keys.byContainer[container]?.[epoch];
  if (!epochKeys) throw new Error("a chunk of the file is sealed in an epoch this browser was not given");
  const base = response.headers.get("X-Ubiquity-Patch-Of");
  if (!base) return openChunk({ epoch, identifier: epochKeys.chunkIdentifier, content: epochKeys.chunkContent }, id, body);
  // A sealed patch: `01 ‖ epoch ‖ nonce ‖ AES-GCM(padded: kept from the start (4) ‖ kept from the end (4) ‖ the bytes between)`.
  if (depth >= 8 || !/^[0-9a-f]{64}$/.test(base)) throw new Error("a chunk of the file is more patches deep than devices make");
  const from = await chunkPlaintext(keys, container, base, depth + 1);
  const baseId = hexBytes(base);
  const key = await subtle.importKey("raw", await derived(epochKeys.chunkContent, concat(encoder.encode("chunk-patch"), id, baseId)), "AES-GCM", false, ["decrypt"]);
  let padded;
  try {
    padded = new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: body.subarray(5, 17), additionalData: binding("chunk-patch", 1, epoch, [id, baseId]) }, key, body.subarray(17)));
  } catch {
    throw new Error("a patch of the file does not open: changed, or not of the chunk named");
  }
  const made = applyPatch(from, padded);
  const mac = await subtle.importKey("raw", epochKeys.chunkIdentifier, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  if (!same(new Uint8Array(await subtle.sign("HMAC", mac, made)), id)) throw new Error("a patch of the file does not make the chunk named");
  return made;
}

/** An item's record (opened; null for an item from before records were sealed), its chunk list
 * and their plaintext sizes (null without a record). The chunk list the server serves must be the
 * one the record names (its content token: SHA-256 of "name:size,…" with the plaintext sizes the
 * record keeps), or it is another file's. */
async function recordedChunks(keys, container, item) {
  const chunks = item.manifest.chunks || [];
  if (!item.record) return { record: null, chunks, sizes: null };
  const record = await openRecord(keys, container, item);
  const sizes = leb128(record.z ? unbase64(record.z) : new Uint8Array(0));
  const token = hex(await sha256(encoder.encode(chunks.map((chunk, index) => chunk.hash + ":" + sizes[index]).join(","))));
  if (sizes.length !== chunks.length || token !== record.c) throw new Error("the file's chunk list is not the one its record names");
  return { record, chunks, sizes };
}

/** Downloads an item of a sealed listing: its chunks fetched and opened here, saved as a file. */
export async function downloadSealed(session, container, listed) {
  const keys = await keysOf(session);
  const item = await api("GET", `/web/api/containers/${segment(container)}/sealed/items/${segment(listed.id)}`);
  await saveSealed(keys, container, item, listed.name);
}

/** Saves a state of an item (`id`, `parent`, `kind`, `record`, `manifest`) as a file, its chunks
 * fetched and opened here: `fallbackName` when it has no record. */
async function saveSealed(keys, container, item, fallbackName) {
  if (item.kind !== "file") throw new Error("only a flat file downloads from this page under Advanced Data Protection (a package does not yet)");
  const { record, chunks, sizes } = await recordedChunks(keys, container, item);
  const parts = [];
  for (const [index, chunk] of chunks.entries()) {
    const bytes = await chunkPlaintext(keys, container, chunk.hash);
    if (sizes && bytes.length !== sizes[index]) throw new Error("a chunk of the file is not of the size its record says");
    parts.push(bytes);
  }
  const url = URL.createObjectURL(new Blob(parts, { type: "application/octet-stream" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = record ? record.n : fallbackName;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// MARK: Versions (docs/Encryption.md, "Versions under Advanced")

const itemAddress = (container, id) => `/web/api/containers/${segment(container)}/sealed/items/${segment(id)}`;

/** An item's versions as the versions page shows them — `item` (its name), `current`,
 * `conflicts`, `earlier` (each: revision, deviceName, modificationDate, size, uploaded) — their
 * records opened here (the server lists the states and cannot read them). */
export async function versionsSealed(session, container, id) {
  const keys = await keysOf(session);
  const item = await api("GET", itemAddress(container, id));
  if (item.deleted) throw new APIError(404, "notFound", "this item was deleted");
  const version = async (state) => {
    const record = state.record ? await openRecord(keys, container, { id, parent: state.parent, record: state.record }) : null;
    return {
      revision: state.revision, deviceName: state.deviceName, uploaded: state.uploaded, name: record ? record.n : state.name,
      modificationDate: record ? record.d : state.modificationDate, size: record ? record.s : state.size,
    };
  };
  const current = await version(item);
  const conflicts = [];
  for (const conflict of item.conflicts || []) conflicts.push(await version(conflict));
  const earlier = [];
  for (const revision of (await api("GET", itemAddress(container, id) + "/revisions")).revisions) {
    if (revision.revision !== item.revision) earlier.push(await version(revision));
  }
  return { item: { name: current.name }, current, conflicts, earlier, sealed: true };
}

/** Downloads one version of an item (`revision`), opened here. */
export async function downloadVersionSealed(session, container, id, revision) {
  const keys = await keysOf(session);
  const item = await api("GET", itemAddress(container, id));
  const state = revision === item.revision ? item : { ...(await api("GET", `${itemAddress(container, id)}/revisions/${segment(revision)}`)), id };
  await saveSealed(keys, container, state, item.name);
}

/** Makes an earlier version current again, as a device does: its contents (its chunk list,
 * checked against its record) under the item's name and folder now, in a record sealed here for
 * a new revision, the change signed with this browser's key. */
export async function restoreSealed(session, container, id, revision) {
  const { keys, item, record } = await current(session, container, id);
  const earlier = { ...(await api("GET", `${itemAddress(container, id)}/revisions/${segment(revision)}`)), id };
  if (earlier.kind !== "file") throw new Error("only a flat file's version is restored from this page under Advanced Data Protection (a package's on a device)");
  if (!earlier.record) throw new Error("this version is from before the account's keys: restore it on a device");
  const { record: then } = await recordedChunks(keys, container, earlier);
  const folder = item.parent || null;
  const restored = { ...then, n: record.n, d: Date.now() / 1000 };
  await commitSealed(session, container, [{
    item: id, record: await sealRecord(keys, container, id, folder, restored),
    update: { baseRevision: item.revision, name: await nameTag(keys, container, restored.n, folder), parent: folder, kind: item.kind,
      modificationDate: 0, manifest: earlier.manifest, changeId: newIdentifier() },
  }]);
}

/** Resolves a conflict as a device does: `keep` (the current revision or a conflict version)
 * wins and every other version is resolved; what the server made of it is signed with this
 * browser's key (the devices take only what a commit names, under Advanced). */
export async function resolveSealed(session, container, id, keep) {
  const keys = await keysOf(session);
  const { item, replaced } = await api("POST", itemAddress(container, id) + "/resolve", { keep });
  await signCommit(keys, container, [{
    item: id, folder: item.parent ?? null, recordHash: item.record ? await sha256(unbase64(item.record)) : new Uint8Array(32),
    revision: item.revision, base: replaced === item.revision ? null : replaced, deleted: false, conflict: false, sequence: item.sequence,
  }]);
}

// MARK: Links (docs/Encryption.md, "Public links under Advanced")

/** The 32 bytes HKDF-SHA256 derives from `key` for `info` (no salt): a chunk's or a patch's own key, as `ChunkKeys` derives it. */
async function derived(key, info) {
  const base = await subtle.importKey("raw", key, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: new Uint8Array(0), info }, base, 256));
}

/** Shares an item of a sealed listing as a device does under Advanced: a manifest of the file —
 * its name, size, date, chunks, and each chunk's own key (never the container's keys) — sealed
 * under a new random key that goes in the link after "#", which browsers never send. Returns the
 * link as the server answers it, its path with the key appended. */
export async function shareSealed(session, container, listed) {
  const keys = await keysOf(session);
  const item = await api("GET", `/web/api/containers/${segment(container)}/sealed/items/${segment(listed.id)}`);
  const links = `/web/api/containers/${segment(container)}/items/${segment(listed.id)}/links`;
  if (!item.record) return api("POST", links); // (a file from before the keys: the server serves it itself)
  if (item.kind !== "file" || !item.uploaded) throw new Error("only a flat file that has reached iCloud can be shared");
  const { record, chunks, sizes } = await recordedChunks(keys, container, item);
  const { bases } = await api("POST", `/web/api/containers/${segment(container)}/sealed/bases`, { hashes: chunks.map((chunk) => chunk.hash) });
  const byEpoch = keys.byContainer[container] || {};
  const epochs = Object.keys(byEpoch).map(Number).sort((a, b) => b - a);
  const met = [], seen = new Set();
  for (const chunk of chunks) {
    for (let at = chunk.hash; at && !seen.has(at); at = bases[at]) {
      if (!/^[0-9a-f]{64}$/.test(at)) throw new Error("the server named a base that is not a chunk");
      seen.add(at);
      met.push(at);
    }
  }
  const entries = [];
  for (const name of met) {
    const id = hexBytes(name);
    const entry = { h: name, k: base64(concat(...await Promise.all(epochs.map((epoch) => derived(byEpoch[epoch].chunkContent, concat(encoder.encode("chunk"), id)))))) };
    if (bases[name]) {
      const base = hexBytes(bases[name]);
      entry.b = bases[name];
      entry.p = base64(concat(...await Promise.all(epochs.map((epoch) => derived(byEpoch[epoch].chunkContent, concat(encoder.encode("chunk-patch"), id, base))))));
    }
    entries.push(entry);
  }
  const manifest = { v: 1, n: record.n, s: record.s, d: record.d, e: epochs, c: chunks.map((chunk, index) => ({ h: chunk.hash, z: sizes[index] })), k: entries };
  const linkKey = crypto.getRandomValues(new Uint8Array(32)), nonce = crypto.getRandomValues(new Uint8Array(12));
  const aes = await subtle.importKey("raw", linkKey, "AES-GCM", false, ["encrypt"]);
  const box = new Uint8Array(await subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: binding("link manifest", 1, 0, []) }, aes,
    encoder.encode(JSON.stringify(manifest))));
  const link = await api("POST", links, { revision: item.revision, manifest: base64(concat(new Uint8Array([1, 0, 0, 0, 0]), nonce, box)) });
  const fragment = base64(linkKey).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return { ...link, path: link.path + "#k=" + fragment };
}

// MARK: The page's own changes (docs/Encryption.md, "The page's changes under Advanced")
//
// As a device makes them: the record sealed here and bound to the item and its folder, the name
// given to the server as its keyed tag, the change committed, then a commit of what it made
// signed with this browser's key — which the approving device let into the roster until the
// grant ends — so that every device takes the page's change as it takes another device's.

function u16(value) {
  const out = new Uint8Array(2);
  new DataView(out.buffer).setUint16(0, value);
  return out;
}

function u64(value) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(value));
  return out;
}

/** A text of a wire encoding: its UTF-8 after a 16-bit length. */
function wireText(text) {
  const bytes = encoder.encode(text);
  return concat(u16(bytes.length), bytes);
}

const epochsOf = (keys, container) => Object.keys(keys.byContainer[container] || {}).map(Number).sort((a, b) => a - b);

/** The keyed tag the server sees for `name` in `parent` (as `RecordKey.nameClashTag`: composed,
 * lowercased a character at a time, HMAC-SHA256 under the account's first epoch's name key). */
async function nameTag(keys, container, name, parent) {
  const epochs = epochsOf(keys, container);
  if (epochs.length === 0) throw new Error("this browser was not given that container's keys");
  const folded = [...name.normalize("NFC")].map((character) => character.toLowerCase()).join("");
  const key = await subtle.importKey("raw", keys.byContainer[container][epochs[0]].nameTag, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const tag = new Uint8Array(await subtle.sign("HMAC", key, binding("name", 1, 0, [encoder.encode(parent || ""), encoder.encode(folded)])));
  return hex(tag.subarray(0, 16));
}

/** `record` sealed for `item` in `parent` with the newest epoch's record key (format 1, padded to at least 256 bytes). */
async function sealRecord(keys, container, item, parent, record) {
  const epochs = epochsOf(keys, container);
  const epoch = epochs[epochs.length - 1];
  const key = await subtle.importKey("raw", keys.byContainer[container][epoch].record, "AES-GCM", false, ["encrypt"]);
  const nonce = crypto.getRandomValues(new Uint8Array(12));
  const aad = binding("record", 1, epoch, [encoder.encode(container), encoder.encode(item), encoder.encode(parent || ""), new Uint8Array(0)]);
  const box = new Uint8Array(await subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: aad }, key, pad(encoder.encode(JSON.stringify(record)), 256)));
  return concat(new Uint8Array([1]), u32(epoch), nonce, box);
}

/** This browser's identifier in the roster (as `DevicePublicKeys.deviceIdentifier`). */
async function signerOf(browser) {
  return hex((await sha256(concat(encoder.encode("ubiquity device"), browser.signingPublic, browser.agreementPublic))).subarray(0, 16));
}

/** A commit's content (format 1): each outcome's item, folder, record hash, revision, base,
 * deleted and conflict flags, and the container's sequence. */
function commitContent(outcomes) {
  const parts = [new Uint8Array([1]), u16(outcomes.length)];
  const optional = (text) => text == null ? new Uint8Array([0]) : concat(new Uint8Array([1]), wireText(text));
  for (const outcome of outcomes) {
    parts.push(wireText(outcome.item), optional(outcome.folder), outcome.recordHash, wireText(outcome.revision), optional(outcome.base),
      new Uint8Array([outcome.deleted ? 1 : 0, outcome.conflict ? 1 : 0]), u64(outcome.sequence));
  }
  return concat(...parts);
}

/** Signs what a change made as the next commit of this browser's chain in `container`, and
 * gives it to the server (which keeps it for the devices; they check it against the roster). */
async function signCommit(keys, container, outcomes) {
  if (!keys.rosterEntry) throw new Error("the device that let this browser in did not let its key sign (update that device's ubiquity)");
  const signer = await signerOf(keys.browser);
  const chainName = `chain:${signer}:${container}`;
  const head = (await stored(chainName)) || { sequence: 0, hash: new Uint8Array(32) };
  const content = commitContent(outcomes);
  const contentHash = await sha256(content);
  const sequence = head.sequence + 1;
  const signed = binding("commit", 1, 0, [encoder.encode(container), encoder.encode(signer), u64(sequence), head.hash, contentHash,
    u64(keys.rosterEntry.index), keys.rosterEntry.hash, u64(0)]);
  const signature = new Uint8Array(await subtle.sign({ name: "Ed25519" }, keys.browser.signing.privateKey, signed));
  const commit = concat(new Uint8Array([1]), wireText(container), wireText(signer), u64(sequence), head.hash, contentHash,
    u64(keys.rosterEntry.index), keys.rosterEntry.hash, u16(0), signature);
  await api("POST", `/web/api/containers/${segment(container)}/sealed/signed-commits`, { commits: [{ commit: base64(commit), content: base64(content) }] });
  await stored(chainName, { sequence, hash: await sha256(concat(signed, signature)) });
}

const newIdentifier = () => hex(crypto.getRandomValues(new Uint8Array(16)));

/** Commits `changes` ({ item, update, record }) as one batch, then signs what they made. A
 * refused change throws its error (the others are signed first). */
async function commitSealed(session, container, changes) {
  const keys = await keysOf(session);
  const answer = await api("POST", `/web/api/containers/${segment(container)}/sealed/commits`, {
    commits: changes.map((change) => ({ item: change.item, update: { ...change.update, record: change.record ? base64(change.record) : undefined } })),
  });
  const outcomes = [];
  let refused = null;
  for (const [index, result] of answer.results.entries()) {
    if (result.error) { refused ||= result.error; continue; }
    const change = changes[index], made = result.commit;
    outcomes.push({
      item: change.item, folder: made.item.parent ?? null, recordHash: change.record ? await sha256(change.record) : new Uint8Array(32),
      revision: made.revision, base: change.update.baseRevision ?? null, deleted: change.update.deleted === true,
      conflict: made.outcome !== "current", sequence: made.item.sequence,
    });
  }
  if (outcomes.length) await signCommit(keys, container, outcomes);
  if (refused) throw new APIError(409, refused.code, refused.message);
}

/** The item's whole state and its opened record (the change is made from them). */
async function current(session, container, id) {
  const keys = await keysOf(session);
  const item = await api("GET", `/web/api/containers/${segment(container)}/sealed/items/${segment(id)}`);
  if (!item.record) throw new Error("this item is from before the account's keys: only a device changes it under Advanced Data Protection");
  return { keys, item, record: await openRecord(keys, container, item) };
}

/** Renames and moves an item of a sealed listing: `name` (or its own) in `parent` (undefined: where it is; null: the top). */
export async function moveSealed(session, container, listed, { name, parent } = {}) {
  const { keys, item, record } = await current(session, container, listed.id);
  const folder = parent === undefined ? (item.parent || null) : parent;
  if (folder) {
    const items = await openedItems(session, container);
    for (let at = folder; at; at = items.get(at)?.parent) {
      if (at === item.id) throw new APIError(400, "intoItself", "a folder cannot move into itself");
    }
  }
  const renamed = { ...record, n: name ?? record.n };
  const sealed = await sealRecord(keys, container, item.id, folder, renamed);
  await commitSealed(session, container, [{
    item: item.id, record: sealed,
    update: { baseRevision: item.revision, name: await nameTag(keys, container, renamed.n, folder), parent: folder, kind: item.kind,
      modificationDate: 0, manifest: item.manifest, changeId: newIdentifier() },
  }]);
}

/** Deletes an item of a sealed listing — a folder with everything in it, the innermost first —
 * as deletions every device applies (recoverable on a device from Recently Deleted). */
export async function deleteSealed(session, container, listed) {
  const items = await openedItems(session, container);
  const doomed = [];
  const visit = (id) => {
    for (const child of items.values()) if (child.parent === id) visit(child.id);
    const item = items.get(id);
    if (item) doomed.push(item);
  };
  visit(listed.id);
  for (let start = 0; start < doomed.length; start += 1000) {
    const changes = [];
    for (const item of doomed.slice(start, start + 1000)) {
      const state = await api("GET", `/web/api/containers/${segment(container)}/sealed/items/${segment(item.id)}`);
      changes.push({
        item: item.id, record: null,
        update: { baseRevision: state.revision, name: state.name, parent: state.parent ?? null, kind: state.kind, modificationDate: 0,
          manifest: {}, deleted: true, changeId: newIdentifier() },
      });
    }
    await commitSealed(session, container, changes);
  }
}

/** A new folder named `name` in `parent` (null: the top), its record sealed here: `{ id }`. */
export async function newFolderSealed(session, container, parent, name) {
  const keys = await keysOf(session);
  const id = newIdentifier();
  const record = { v: 1, n: name, d: Date.now() / 1000, s: 0, c: "folder" };
  await commitSealed(session, container, [{
    item: id, record: await sealRecord(keys, container, id, parent, record),
    update: { name: await nameTag(keys, container, name, parent), parent: parent || null, kind: "directory", modificationDate: 0,
      manifest: {}, changeId: newIdentifier() },
  }]);
  return { id };
}

/** The folder `name` in `parent` (null: the top), made here if it is not there (names compared
 * as their tags compare them): `{ id }`. A file of that name refuses it. */
export async function folderSealed(session, container, parent, name) {
  const items = await openedItems(session, container);
  const same = [...items.values()].find((item) => item.parent === (parent || null) && folded(item.name) === folded(name));
  if (same && same.kind !== "directory") throw new APIError(409, "nameTaken", "an item of that name is there already");
  return same ? { id: same.id } : newFolderSealed(session, container, parent, name);
}

/** Unsigned LEB128 numbers (a record's chunk sizes). */
function leb128Encoded(values) {
  const bytes = [];
  for (let value of values) {
    do {
      let byte = value % 128;
      value = Math.floor(value / 128);
      if (value > 0) byte |= 0x80;
      bytes.push(byte);
    } while (value > 0);
  }
  return new Uint8Array(bytes);
}

/** A name as the server compares names by their tags: composed, lowercased a character at a time. */
const folded = (name) => [...name.normalize("NFC")].map((character) => character.toLowerCase()).join("");

/** How much of a file one sealed chunk holds when the page uploads it: fixed cuts, so the
 * boundaries say nothing of the contents (a device cutting the file later with its keyed
 * chunker sends it whole once). */
export const uploadChunkBytes = 512 * 1024;

/** Uploads `file` into `parent` (null: the top) as a device does under Advanced: cut, each chunk
 * named by its keyed MAC and sealed here, its record sealed and its name tagged here, the change
 * signed by this browser. A file of that name there gets a new revision (its earlier contents
 * stay a version on the devices); a folder of that name refuses it. Reports bytes sealed and sent. */
export async function uploadSealed(session, container, parent, file, onProgress = () => {}) {
  const keys = await keysOf(session);
  const epochs = epochsOf(keys, container);
  if (epochs.length === 0) throw new Error("this browser was not given that container's keys");
  const epoch = epochs[epochs.length - 1];
  const chunkKeys = { epoch, identifier: keys.byContainer[container][epoch].chunkIdentifier, content: keys.byContainer[container][epoch].chunkContent };
  const items = await openedItems(session, container);
  const same = [...items.values()].find((item) => item.parent === (parent || null) && folded(item.name) === folded(file.name));
  if (same && same.kind !== "file") throw new APIError(409, "nameTaken", "a folder of that name is there already");
  const chunks = [];
  for (let start = 0; start < file.size; start += uploadChunkBytes) {
    const plaintext = new Uint8Array(await file.slice(start, start + uploadChunkBytes).arrayBuffer());
    const { id, body } = await sealChunk(chunkKeys, plaintext);
    const hash = hex(id);
    await api("PUT", `/web/api/containers/${segment(container)}/sealed/chunks/${hash}`, new Blob([body]));
    chunks.push({ hash, sealed: body.length, plain: plaintext.length });
    onProgress(Math.min(file.size, start + plaintext.length), file.size);
  }
  const record = { v: 1, n: file.name, d: file.lastModified / 1000, s: file.size, c: hex(await sha256(encoder.encode(chunks.map((chunk) => chunk.hash + ":" + chunk.plain).join(",")))) };
  if (chunks.length) record.z = base64(leb128Encoded(chunks.map((chunk) => chunk.plain)));
  const id = same ? same.id : newIdentifier();
  const base = same ? (await api("GET", `/web/api/containers/${segment(container)}/sealed/items/${segment(same.id)}`)).revision : undefined;
  await commitSealed(session, container, [{
    item: id, record: await sealRecord(keys, container, id, parent, record),
    update: { baseRevision: base, name: await nameTag(keys, container, file.name, parent), parent: parent || null, kind: "file", modificationDate: 0,
      manifest: { chunks: chunks.map((chunk) => ({ hash: chunk.hash, size: chunk.sealed })) }, changeId: newIdentifier() },
  }]);
}
