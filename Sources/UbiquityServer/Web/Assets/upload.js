// Uploads go in parts of 4 MiB, four on the way at once: the server cuts each into chunks as a
// device would and answers their list; a part that fails (the network, a restart) is sent again with growing
// pauses, the parts already answered are not; then the file is committed from the lists.
// Devices see the result like any other change.
//
// An upload survives a reload of the page: the lists of the parts answered are kept in the
// browser's local storage under the file's place, name, size and date, and when the same file
// is uploaded to the same place again, only the parts not answered yet are sent. If the server
// no longer has some of them (collected since), it says so and the file is sent whole again.

import { api, APIError, segment } from "./api.js";

export const partBytes = 4 * 1024 * 1024;

// Parts on the way at once: while the server cuts some into chunks the next are on the wire
// (four: the browser's own work on each is most of the time an upload takes; two gave half the
// speed, six no more than four).
const partsAtOnce = 4;

const resumePrefix = "ubiquity-upload:";

function sleep(milliseconds) { return new Promise((resolve) => setTimeout(resolve, milliseconds)); }

async function withRetries(action) {
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await action();
    } catch (error) {
      // A refusal (bad name, quota, no such folder) is final; a failure on the way is tried again.
      const passing = !(error instanceof APIError) || error.status === 0 || error.status === 408 || error.status === 429
        || (error.status >= 500 && error.status !== 507);
      if (!passing || attempt >= 8) throw error;
      await sleep(Math.min(30000, 500 * 2 ** attempt));
    }
  }
}

function resumeKey(container, parent, file) {
  return resumePrefix + JSON.stringify([container, parent || "", file.webkitRelativePath || file.name, file.size, file.lastModified]);
}

function savedParts(key) {
  try {
    const saved = JSON.parse(localStorage.getItem(key) || "null");
    return saved && Array.isArray(saved.parts) ? saved.parts : [];
  } catch (ignored) {
    return []; // storage refused or damaged: the upload starts over
  }
}

function saveParts(key, parts) {
  try {
    localStorage.setItem(key, JSON.stringify({ parts, saved: Date.now() }));
  } catch (ignored) { /* storage full or refused: this upload is not resumable, nothing more */ }
}

function forget(key) {
  try { localStorage.removeItem(key); } catch (ignored) { /* nothing kept */ }
}

/** Forgets every unfinished upload (at sign-out: the next account must not see their names). */
export function forgetUploads() {
  try {
    for (const key of Object.keys(localStorage)) if (key.startsWith(resumePrefix)) localStorage.removeItem(key);
  } catch (ignored) { /* nothing kept */ }
}

/** Uploads `file` into folder `parent` (null: the container's top); reports bytes sent. */
export async function uploadFile(container, parent, file, onProgress) {
  const key = resumeKey(container, parent, file);
  for (let attempt = 0; ; attempt += 1) {
    const parts = savedParts(key);
    const count = Math.ceil(file.size / partBytes);
    const size = (index) => Math.min(file.size, (index + 1) * partBytes) - index * partBytes;
    const waiting = [];
    let sent = 0;
    for (let index = 0; index < count; index += 1) {
      if (Array.isArray(parts[index])) sent += size(index); else waiting.push(index);
    }
    onProgress(sent, file.size);
    const sender = async () => {
      for (let index = waiting.shift(); index !== undefined; index = waiting.shift()) {
        const start = index * partBytes;
        const answer = await withRetries(() => api("POST", `/web/api/parts?fileSize=${file.size}&container=${encodeURIComponent(container)}`, file.slice(start, start + size(index))));
        parts[index] = answer.chunks;
        saveParts(key, parts);
        sent += size(index);
        onProgress(sent, file.size);
      }
    };
    await Promise.all(Array.from({ length: partsAtOnce }, sender));
    onProgress(file.size, file.size);
    try {
      const made = await withRetries(() => api("POST", `/web/api/containers/${segment(container)}/files`, {
        name: file.name, parent, chunks: parts.slice(0, count).flat(), modificationDate: file.lastModified / 1000,
      }));
      forget(key);
      return made;
    } catch (error) {
      // The parts stay kept for another try, unless the server no longer has them all.
      if (!(error instanceof APIError) || error.code !== "missingChunks" || attempt > 0) throw error;
      forget(key);
    }
  }
}

/** The folder `name` in `parent`, made if it is not there. */
export function makeFolder(container, parent, name) {
  return withRetries(() => api("POST", `/web/api/containers/${segment(container)}/folders`, { name, parent }));
}

/** Uploads files chosen as a folder (their relative paths name the folders to make, each with
 * `folderIn(parent, name)`: the server's, or under Advanced the page's own). */
export async function uploadTree(container, parent, files, onFile, folderIn = (folder, name) => makeFolder(container, folder, name)) {
  const folders = new Map();
  for (const file of files) {
    const parts = (file.webkitRelativePath || file.name).split("/");
    let folder = parent, path = "";
    for (const name of parts.slice(0, -1)) {
      path += "/" + name;
      if (!folders.has(path)) folders.set(path, (await folderIn(folder, name)).id);
      folder = folders.get(path);
    }
    await onFile(file, folder);
  }
}
