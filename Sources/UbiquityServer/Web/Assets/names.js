// Names are shown as text, never as markup (text nodes only), and characters that would hide
// or reorder text — bidirectional overrides and isolates, zero-width marks, other controls —
// are shown as visible codes, so "invoice\u202Etxt.exe" cannot pass for "invoiceexe.txt".

const controls = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/gu;

function code(character) {
  return "<U+" + character.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + ">";
}

/** The name as a node: isolated from the text around it, its control characters made visible. */
export function nameNode(name) {
  const node = document.createElement("bdi");
  let last = 0;
  for (const match of name.matchAll(controls)) {
    if (match.index > last) node.append(document.createTextNode(name.slice(last, match.index)));
    const mark = document.createElement("span");
    mark.className = "control";
    mark.title = "an invisible control character";
    mark.textContent = code(match[0]);
    node.append(mark);
    last = match.index + match[0].length;
  }
  if (last < name.length) node.append(document.createTextNode(name.slice(last)));
  return node;
}

/** The name as plain text with its control characters made visible (titles, labels). */
export function plainName(name) { return name.replace(controls, code); }

/** Bytes as people read them. */
export function formatBytes(bytes) {
  if (bytes < 1024) return bytes + " bytes";
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return value.toFixed(value < 10 ? 1 : 0) + " " + units[unit];
}

/** A date (seconds since 1970) in the reader's locale. */
export function formatDate(seconds) {
  return new Date(seconds * 1000).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}
