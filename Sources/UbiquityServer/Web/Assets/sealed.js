// The encrypted format (docs/Encryption.md) in the browser, with WebCrypto: the service keys an
// account's root key derives, and chunks sealed and opened exactly as devices do (format 1).
// What a page uses to read and write an account's data when the server holds no key
// (Advanced Data Protection web sessions, public links whose key rides in the URL fragment).

const encoder = new TextEncoder();
const subtle = crypto.subtle;

/** The format this page writes. */
export const chunkFormat = 1;

/** `parts` side by side in one array. */
export function concat(...parts) {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.length; }
  return out;
}

/** A 32-bit big-endian number. */
export function u32(value) {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value >>> 0);
  return out;
}

/** Associated data: "ubiquity LABEL", 0, format, epoch, then each field after its length. */
export function binding(label, format, epoch, fields) {
  return concat(encoder.encode("ubiquity " + label), new Uint8Array([0, format]), u32(epoch), ...fields.flatMap((field) => [u32(field.length), field]));
}

async function hkdf(key, salt, info, bytes) {
  const base = await subtle.importKey("raw", key, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt, info }, base, bytes * 8));
}

/** A service key of the root key of `epoch`: chunk-id, chunk-content, chunker, item-record, … for `scope`. */
export async function serviceKey(root, epoch, purpose, scope) {
  const info = concat(encoder.encode("ubiquity/1/" + purpose), new Uint8Array([0]), encoder.encode(scope));
  return hkdf(root, concat(encoder.encode("ubiquity epoch"), u32(epoch)), info, 32);
}

/** A container's chunk keys in one epoch. */
export async function chunkKeys(root, epoch, container) {
  return { epoch, identifier: await serviceKey(root, epoch, "chunk-id", container), content: await serviceKey(root, epoch, "chunk-content", container) };
}

/** Padmé: a length rounded up so that only O(log log L) bits of it remain. */
export function paddedLength(length) {
  if (length <= 1) return Math.max(length, 1);
  const exponent = 31 - Math.clz32(length);
  const bitsOfExponent = 32 - Math.clz32(exponent);
  const mask = (1 << (exponent - bitsOfExponent)) - 1;
  return (length + mask) & ~mask;
}

/** `plaintext` ‖ 0x80 ‖ zeros, to its Padmé length and at least `minimum` bytes. */
export function pad(plaintext, minimum = 0) {
  const padded = new Uint8Array(Math.max(minimum, paddedLength(plaintext.length + 1)));
  padded.set(plaintext);
  padded[plaintext.length] = 0x80;
  return padded;
}

/** Padded bytes without their padding (Padmé: 0x80, then zeros); `refusal` is the error's message. */
export function unpad(padded, refusal = "malformed: bad padding") {
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end--;
  if (end < 0 || padded[end] !== 0x80) throw new Error(refusal);
  return padded.subarray(0, end);
}

/** The chunk an opened sealed patch makes from the chunk `base`: its padded bytes are `kept
 * from the start (4) ‖ kept from the end (4) ‖ the bytes between`. */
export function applyPatch(base, padded) {
  const patch = unpad(padded, "a patch of the file is malformed");
  if (patch.length < 8) throw new Error("a patch of the file is malformed");
  const view = new DataView(patch.buffer, patch.byteOffset, 8);
  const prefix = view.getUint32(0), suffix = view.getUint32(4);
  if (prefix + suffix > base.length) throw new Error("a patch of the file keeps more than its base has");
  return concat(base.subarray(0, prefix), patch.subarray(8), base.subarray(base.length - suffix));
}

/** A chunk's identifier: HMAC-SHA256 of its plaintext under the identifier key. */
export async function chunkIdentifier(keys, plaintext) {
  const key = await subtle.importKey("raw", keys.identifier, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await subtle.sign("HMAC", key, plaintext));
}

async function contentKey(keys, id) {
  const bits = await hkdf(keys.content, new Uint8Array(0), concat(encoder.encode("chunk"), id), 32);
  return subtle.importKey("raw", bits, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** Seals `plaintext`: its identifier and the stored body — the same bytes a device seals (the
 * nonce, like the key, is derived for this identifier alone). */
export async function sealChunk(keys, plaintext) {
  const id = await chunkIdentifier(keys, plaintext);
  const nonce = await hkdf(keys.content, new Uint8Array(0), concat(encoder.encode("chunk-nonce"), id), 12);
  const box = await subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: binding("chunk", chunkFormat, keys.epoch, [id]) }, await contentKey(keys, id), pad(plaintext));
  return { id, body: concat(new Uint8Array([chunkFormat]), u32(keys.epoch), nonce, new Uint8Array(box)) };
}

/** The plaintext of a sealed chunk asked for as `id`: refused (an Error naming why) if it is of
 * another format or epoch, changed, truncated, or holds other contents than `id` names. */
export async function openChunk(keys, id, body) {
  if (body.length < 5 + 12 + 16 + 1) throw new Error("malformed: shorter than a sealed chunk");
  if (body[0] !== chunkFormat) throw new Error("unsupportedFormat: chunk format " + body[0]);
  const epoch = new DataView(body.buffer, body.byteOffset + 1, 4).getUint32(0);
  if (epoch !== keys.epoch) throw new Error("authenticationFailed: sealed under epoch " + epoch);
  let padded;
  try {
    padded = new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: body.subarray(5, 17), additionalData: binding("chunk", chunkFormat, epoch, [id]) },
      await contentKey(keys, id), body.subarray(17)));
  } catch {
    throw new Error("authenticationFailed: the chunk does not open");
  }
  const plaintext = unpad(padded);
  const check = await chunkIdentifier(keys, plaintext);
  if (check.length !== id.length || check.some((byte, index) => byte !== id[index])) throw new Error("identifierMismatch: other contents than the identifier names");
  return plaintext;
}
