// Uploads go in parts of 4 MiB: the server cuts each into chunks as a device would and
// answers their list; a part that fails (the network, a restart) is sent again with growing
// pauses, the parts already answered are not; then the file is committed from the lists.
// Devices see the result like any other change.

import { api, APIError, segment } from "./api.js";

export const partBytes = 4 * 1024 * 1024;

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

/** Uploads `file` into folder `parent` (null: the container's top); reports bytes sent. */
export async function uploadFile(container, parent, file, onProgress) {
  const chunks = [];
  let sent = 0;
  for (let start = 0; start < file.size; start += partBytes) {
    const part = file.slice(start, Math.min(file.size, start + partBytes));
    const answer = await withRetries(() => api("POST", "/web/api/parts", part));
    chunks.push(...answer.chunks);
    sent += part.size;
    onProgress(sent, file.size);
  }
  onProgress(file.size, file.size);
  return withRetries(() => api("POST", `/web/api/containers/${segment(container)}/files`, {
    name: file.name, parent, chunks, modificationDate: file.lastModified / 1000,
  }));
}

/** The folder `name` in `parent`, made if it is not there. */
export function makeFolder(container, parent, name) {
  return withRetries(() => api("POST", `/web/api/containers/${segment(container)}/folders`, { name, parent }));
}

/** Uploads files chosen as a folder (their relative paths name the folders to make). */
export async function uploadTree(container, parent, files, onFile) {
  const folders = new Map();
  for (const file of files) {
    const parts = (file.webkitRelativePath || file.name).split("/");
    let folder = parent, path = "";
    for (const name of parts.slice(0, -1)) {
      path += "/" + name;
      if (!folders.has(path)) folders.set(path, (await makeFolder(container, folder, name)).id);
      folder = folders.get(path);
    }
    await onFile(file, folder);
  }
}
