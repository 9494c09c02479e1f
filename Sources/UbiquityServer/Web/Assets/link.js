// A public link's page under Advanced Data Protection (docs/Encryption.md, "Public links under
// Advanced"). The server keeps a manifest the publishing device sealed; the key that opens it
// rides in this page's address after "#", which browsers never send. The page opens the
// manifest (the file's name, size, date, its chunks, and each chunk's own key), fetches the
// chunks the server keeps for this link — only those — and opens each with its key: a chunk
// the server changed, swapped or cut does not open, and nothing is saved.

import { applyPatch, binding, unpad } from "./sealed.js";

const subtle = crypto.subtle;
const $ = (id) => document.getElementById(id);
const token = location.pathname.split("/")[2] || "";
const hexBytes = (hex) => Uint8Array.from(hex.match(/../g).map((pair) => parseInt(pair, 16)));
const same = (a, b) => a.length === b.length && a.every((byte, index) => byte === b[index]);
const unbase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

/** The key in the address's fragment (`#k=` base64url), or null. */
function fragmentKey() {
  const value = new URLSearchParams(location.hash.slice(1)).get("k");
  if (!value) return null;
  try {
    const bytes = unbase64(value.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - value.length % 4) % 4));
    return bytes.length === 32 ? bytes : null;
  } catch {
    return null;
  }
}

async function fetched(path, what) {
  const response = await fetch(path, { cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" });
  if (response.status === 404) throw new Error("this link does not exist any more (it expired or was revoked)");
  if (response.status === 429) throw new Error("too many requests from this address: try again in a minute");
  if (!response.ok) throw new Error(what + " cannot be fetched (" + response.status + ")");
  return response;
}

/** The manifest, opened with the fragment's key: `01 ‖ epoch ‖ nonce ‖ AES-GCM(JSON)`. */
async function openManifest(key) {
  const body = new Uint8Array(await (await fetched(`/l/${token}/manifest`, "the link's manifest")).arrayBuffer());
  if (body.length < 5 + 12 + 16 || body[0] !== 1) throw new Error("this link's manifest is of a format this page does not read");
  const aes = await subtle.importKey("raw", key, "AES-GCM", false, ["decrypt"]);
  let json;
  try {
    json = await subtle.decrypt({ name: "AES-GCM", iv: body.subarray(5, 17), additionalData: binding("link manifest", 1, 0, []) }, aes, body.subarray(17));
  } catch {
    throw new Error("this link does not open: the address is incomplete, or the server changed what it keeps");
  }
  const manifest = JSON.parse(new TextDecoder().decode(json));
  if (manifest.v !== 1) throw new Error("this link's manifest is of a format this page does not read");
  const keys = new Map(manifest.k.map((entry) => [entry.h, { keys: unbase64(entry.k), base: entry.b || null, patchKeys: entry.p ? unbase64(entry.p) : null }]));
  return { name: manifest.n, size: manifest.s, date: manifest.d, epochs: manifest.e, chunks: manifest.c, keys };
}

/** The 32-byte key of `epoch` among `keys` (one per manifest epoch, in order), or null. */
function keyOf(manifest, keys, epoch) {
  const index = manifest.epochs.indexOf(epoch);
  return index < 0 || !keys ? null : keys.subarray(index * 32, index * 32 + 32);
}

async function decrypt(key, body, aad, what) {
  const aes = await subtle.importKey("raw", key, "AES-GCM", false, ["decrypt"]);
  try {
    return new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: body.subarray(5, 17), additionalData: aad }, aes, body.subarray(17)));
  } catch {
    throw new Error(what + " does not open: the server changed it or sent another");
  }
}

/** The plaintext of chunk `hash`: kept in plaintext (it hashes to its name), sealed, or as a
 * sealed patch of another chunk (made from that one, `depth` patches down so far). */
async function chunkPlaintext(manifest, hash, depth = 0) {
  const entry = manifest.keys.get(hash);
  if (!entry) throw new Error("the file names a chunk its link holds no key of");
  const response = await fetched(`/l/${token}/chunks/${hash}`, "a chunk of the file");
  const body = new Uint8Array(await response.arrayBuffer());
  const id = hexBytes(hash);
  if (same(new Uint8Array(await subtle.digest("SHA-256", body)), id)) return body;
  if (body.length < 5 + 12 + 16 || body[0] !== 1) throw new Error("a chunk of the file is of a format this page does not read");
  const epoch = new DataView(body.buffer, body.byteOffset + 1, 4).getUint32(0);
  const base = response.headers.get("X-Ubiquity-Patch-Of");
  if (!base) {
    const key = keyOf(manifest, entry.keys, epoch);
    if (!key) throw new Error("a chunk of the file is sealed in an epoch its link holds no key of");
    return unpad(await decrypt(key, body, binding("chunk", 1, epoch, [id]), "a chunk of the file"), "a chunk of the file is malformed");
  }
  // A sealed patch: only of the base the manifest names (the device asked the server which).
  if (depth >= 8 || base !== entry.base) throw new Error("a chunk of the file is served as a patch its link does not name");
  const key = keyOf(manifest, entry.patchKeys, epoch);
  if (!key) throw new Error("a patch of the file is sealed in an epoch its link holds no key of");
  const from = await chunkPlaintext(manifest, base, depth + 1);
  return applyPatch(from, await decrypt(key, body, binding("chunk-patch", 1, epoch, [id, hexBytes(base)]), "a patch of the file"));
}

function describe(size) {
  const units = ["bytes", "KB", "MB", "GB", "TB"];
  let value = size, unit = 0;
  while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit++; }
  return (unit === 0 ? value : value.toFixed(1)) + " " + units[unit];
}

async function download(manifest) {
  const button = $("link-download"), progress = $("link-progress");
  button.disabled = true;
  progress.hidden = false;
  progress.max = Math.max(manifest.size, 1);
  $("link-error").textContent = "";
  try {
    const parts = [];
    let done = 0;
    for (const chunk of manifest.chunks) {
      const bytes = await chunkPlaintext(manifest, chunk.h);
      if (bytes.length !== chunk.z) throw new Error("a chunk of the file is not of the size its link says");
      parts.push(bytes);
      done += bytes.length;
      progress.value = done;
    }
    if (done !== manifest.size) throw new Error("the file's chunks do not make its size");
    const url = URL.createObjectURL(new Blob(parts, { type: "application/octet-stream" }));
    const link = document.createElement("a");
    link.href = url;
    link.download = manifest.name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    document.body.dataset.state = "downloaded";
  } catch (error) {
    $("link-error").textContent = error.message;
    document.body.dataset.state = "failed";
  } finally {
    button.disabled = false;
  }
}

async function start() {
  const key = fragmentKey();
  if (!key) {
    $("link-error").textContent = "this address is incomplete: the part after “#” that opens the file is missing";
    document.body.dataset.state = "failed";
    return;
  }
  try {
    const manifest = await openManifest(key);
    $("link-name").textContent = manifest.name;
    $("link-facts").textContent = describe(manifest.size) + " · " + new Date(manifest.date * 1000).toLocaleString();
    $("link-file").hidden = false;
    document.title = manifest.name;
    const button = $("link-download");
    button.disabled = false;
    button.addEventListener("click", () => download(manifest));
    document.body.dataset.state = "ready";
  } catch (error) {
    $("link-error").textContent = error.message;
    document.body.dataset.state = "failed";
  }
}

start();
