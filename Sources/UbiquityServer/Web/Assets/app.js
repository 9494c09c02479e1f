// The web interface's page: sign-in, the account's containers, a folder's items (sorted,
// searched, uploaded into), kept current by the server's events.

import { api, APIError, setCSRF, segment } from "./api.js";
import { nameNode, plainName, formatBytes, formatDate } from "./names.js";
import { uploadFile, uploadTree, makeFolder, forgetUploads } from "./upload.js";
import {
  sealedListing, downloadSealed, shareSealed, moveSealed, deleteSealed, newFolderSealed, uploadSealed, folderSealed, versionsSealed, downloadVersionSealed,
  restoreSealed, resolveSealed,
} from "./advanced.js";

const $ = (id) => document.getElementById(id);
let session = null;
let events = null;
let view = { container: null, folder: null, listing: null };
let refreshing = null;
let refreshAgain = false;

function show(section) {
  for (const id of ["sign-in", "containers", "folder", "versions", "deleted", "storage", "kv", "devices", "links", "shared", "share-folder", "admin"]) $(id).hidden = id !== section;
}

function say(text) {
  $("status").textContent = text;
  if (text) setTimeout(() => { if ($("status").textContent === text) $("status").textContent = ""; }, 5000);
}

function failed(error) {
  if (error instanceof APIError && error.status === 401) return showSignIn();
  say(error.message || String(error));
}

// MARK: Session

async function start() {
  try {
    session = await api("GET", "/web/api/session");
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return showSignIn();
    return say(error.message);
  }
  signedIn();
}

function showSignIn() {
  session = null;
  if (events) { events.close(); events = null; }
  $("who").textContent = "";
  $("sign-out").hidden = true;
  $("nav").hidden = true;
  $("nav-admin").hidden = true;
  show("sign-in");
  $("account").focus();
}

function signedIn() {
  setCSRF(session.csrf);
  $("who").textContent = plainName(session.account);
  $("sign-out").hidden = false;
  $("nav").hidden = false;
  $("nav-admin").hidden = !session.admin;
  listen();
  route();
}

$("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("sign-in-error").textContent = "";
  try {
    session = await api("POST", "/web/api/sign-in", { account: $("account").value, password: $("password").value });
    $("password").value = "";
    signedIn();
  } catch (error) {
    $("sign-in-error").textContent = error.status === 401 ? "Unknown account or wrong password." : error.message;
  }
});

$("sign-out").addEventListener("click", async () => {
  try { await api("POST", "/web/api/sign-out"); } catch (error) { /* signed out already */ }
  forgetUploads();
  setCSRF("");
  location.hash = "#/";
  showSignIn();
});

// The server's events: a change in the container shown is shown at once.
function listen() {
  if (events) events.close();
  events = new EventSource("/web/api/events");
  events.onmessage = (message) => {
    let event;
    try { event = JSON.parse(message.data); } catch (ignored) { return; }
    if (event.type === "changed" && (view.container === null || view.container === event.container)) refresh();
    if (event.type === "keyValueChanged" && (view.kind === "kv" || view.kind === "storage")) refresh();
    if (event.type === "sharesChanged" && (view.kind === "shared" || view.kind === "share")) refresh();
    if (event.type === "shareChanged" && view.kind === "share" && view.share === event.container) refresh();
  };
  events.onerror = () => {
    // Closed for good (signed out or revoked elsewhere): ask who is signed in.
    if (events && events.readyState === EventSource.CLOSED) { events = null; start(); }
  };
}

// MARK: Views

window.addEventListener("hashchange", () => { if (session) route(); });

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((part) => part.length > 0).map(decodeURIComponent);
  if (parts[0] === "c" && parts[1]) {
    view = { kind: "folder", container: parts[1], folder: parts[2] || null, listing: null };
  } else if (parts[0] === "v" && parts[1] && parts[2]) {
    view = { kind: "versions", container: parts[1], item: parts[2], folder: parts[3] || null };
  } else if (parts[0] === "deleted") {
    view = { kind: "deleted", container: null, folder: null };
  } else if (parts[0] === "storage" || parts[0] === "devices" || parts[0] === "links" || parts[0] === "admin") {
    view = { kind: parts[0], container: null, folder: null };
  } else if (parts[0] === "shared") {
    view = { kind: "shared", container: null, folder: null };
  } else if (parts[0] === "s" && parts[1]) {
    view = { kind: "share", share: parts[1], folder: parts[2] || null, container: null };
  } else if (parts[0] === "kv" && parts[1]) {
    view = { kind: "kv", store: parts[1], container: null, folder: null };
  } else {
    view = { kind: "containers", container: null, folder: null, listing: null };
  }
  refresh().then(() => $("main").focus());
}

function refresh() {
  if (refreshing) { refreshAgain = true; return refreshing; }
  refreshing = (async () => {
    do {
      refreshAgain = false;
      try {
        if (view.kind === "folder") await showFolder();
        else if (view.kind === "versions") await showVersions();
        else if (view.kind === "deleted") await showDeleted();
        else if (view.kind === "storage") await showStorage();
        else if (view.kind === "kv") await showKeyValues();
        else if (view.kind === "devices") await showDevices();
        else if (view.kind === "links") await showLinks();
        else if (view.kind === "admin") await showAdmin();
        else if (view.kind === "shared") await showShared();
        else if (view.kind === "share") await showShareFolder();
        else await showContainers();
      } catch (error) {
        failed(error);
      }
    } while (refreshAgain);
    refreshing = null;
  })();
  return refreshing;
}

async function showContainers() {
  const [answer, me] = await Promise.all([api("GET", "/web/api/containers"), api("GET", "/web/api/session")]);
  $("usage").textContent = `${formatBytes(me.usedBytes)} of ${formatBytes(me.quotaBytes)} used`;
  const rows = answer.containers.map((container) => {
    const row = document.createElement("tr");
    row.append(linkCell(container.identifier, "#/c/" + segment(container.identifier)),
      cell(String(container.items), "num"), cell(formatBytes(container.bytes), "num"));
    return row;
  });
  $("container-rows").replaceChildren(...rows);
  $("no-containers").hidden = rows.length > 0;
  document.title = "Ubiquity";
  show("containers");
}

// Items a page of a folder's listing holds; a folder of more shows "Show more".
const pageSize = 200;

// The folder's listing, sorted and searched by the server (so a folder of 10,000 items is not
// sent whole): `offset`, `limit` of what matches.
function folderQuery(offset, limit) {
  const query = new URLSearchParams({ sort: $("sort").value, offset: String(offset), limit: String(limit) });
  const filter = $("filter").value.trim();
  if (filter) query.set("filter", filter);
  if (view.folder) query.set("parent", view.folder);
  return `/web/api/containers/${segment(view.container)}/folder?${query}`;
}

async function showFolder() {
  // Refreshed (a change arrived): as many rows as were shown.
  const shown = view.listing ? Math.min(2000, Math.max(pageSize, view.listing.items.length)) : pageSize;
  try {
    view.listing = await api("GET", folderQuery(0, shown));
  } catch (error) {
    // Advanced Data Protection: the server cannot open the records; a device gives this page the keys.
    if (!(error instanceof APIError && error.code === "sealedOnDevices")) throw error;
    view.listing = await sealedListing(session, view.container, view.folder, $("sort").value, $("filter").value.trim());
  }
  const crumbs = [crumb(view.container, "#/c/" + segment(view.container))];
  for (const folder of view.listing.path) crumbs.push(crumb(folder.name, `#/c/${segment(view.container)}/${segment(folder.id)}`));
  crumbs.unshift(crumb("iCloud Drive", "#/"));
  $("crumbs").replaceChildren(...crumbs);
  const here = view.listing.path.length ? view.listing.path[view.listing.path.length - 1].name : view.container;
  $("folder-title").replaceChildren(nameNode(here));
  document.title = plainName(here) + " — Ubiquity";
  renderItems();
  show("folder");
}

function crumb(name, href) {
  const item = document.createElement("li");
  const link = document.createElement("a");
  link.href = href;
  link.append(nameNode(name));
  item.append(link);
  return item;
}

function linkCell(name, href) {
  const td = document.createElement("td");
  const link = document.createElement("a");
  link.href = href;
  link.append(nameNode(name));
  td.append(link);
  return td;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function badge(text) {
  const span = document.createElement("span");
  span.className = "badge";
  span.textContent = text;
  return span;
}

async function showMore() {
  const more = await api("GET", folderQuery(view.listing.items.length, pageSize));
  view.listing.items.push(...more.items);
  view.listing.total = more.total;
  renderItems();
}

function renderItems() {
  if (!view.listing) return;
  const rows = view.listing.items.map((item) => {
    const row = document.createElement("tr");
    row.dataset.name = item.name;
    const name = document.createElement("td");
    const link = document.createElement("a");
    link.append(nameNode(item.name));
    if (item.kind === "directory") {
      link.href = `#/c/${segment(view.container)}/${segment(item.id)}`;
      link.classList.add("folder");
      link.setAttribute("aria-label", "Folder " + plainName(item.name));
    } else if (view.listing.sealed) {
      link.href = "#";
      link.addEventListener("click", (event) => {
        event.preventDefault();
        downloadSealed(session, view.container, item).catch(failed);
      });
    } else {
      link.href = `/web/api/containers/${segment(view.container)}/items/${segment(item.id)}/download`;
      link.setAttribute("download", "");
      if (item.kind === "package") link.append(badge("package (.zip)"));
    }
    name.append(link);
    if (!item.uploaded && item.kind !== "directory") name.append(badge("waiting for its device"));
    if (item.conflicts > 0) name.append(badge(item.conflicts === 1 ? "1 conflict" : `${item.conflicts} conflicts`));
    row.append(name, cell(formatDate(item.modificationDate)), cell(item.kind === "directory" ? "—" : formatBytes(item.size), "num"));
    const device = document.createElement("td");
    device.append(nameNode(item.deviceName));
    row.append(device, actionsCell(item));
    return row;
  });
  $("item-rows").replaceChildren(...rows);
  const { total } = view.listing;
  $("empty-folder").textContent = $("filter").value.trim() ? "No name here matches the search." : "This folder is empty.";
  $("empty-folder").hidden = rows.length > 0;
  $("more-items").hidden = rows.length >= total;
  $("item-count").textContent = rows.length < total ? `${rows.length.toLocaleString()} of ${total.toLocaleString()} shown` : "";
}

// The name cell of a row named `name` (the row keeps it for tests and scripts), with a badge.
function nameCell(name, row, badgeText) {
  row.dataset.name = name;
  const td = document.createElement("td");
  td.append(nameNode(name));
  if (badgeText) td.append(badge(badgeText));
  return td;
}

function button(text, action, label) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = text;
  if (label) element.setAttribute("aria-label", label);
  element.addEventListener("click", async () => {
    try { await action(); } catch (error) { failed(error); }
  });
  return element;
}

function itemPath(item) { return `/web/api/containers/${segment(view.container)}/items/${segment(item.id)}`; }

// A change to an item: made by the server (it seals records with the account's keys under
// Standard), or under Advanced by this page — its record sealed here, the change signed with
// this browser's key (advanced.js).
const edits = {
  move: (item, change) => view.listing.sealed
    ? moveSealed(session, view.container, item, change.toTop ? { parent: null } : change)
    : api("POST", itemPath(item) + "/move", change),
  remove: (item) => view.listing.sealed ? deleteSealed(session, view.container, item) : api("DELETE", itemPath(item)),
};

function actionsCell(item) {
  const td = document.createElement("td");
  const menu = document.createElement("details");
  menu.className = "actions";
  const summary = document.createElement("summary");
  summary.textContent = "⋯";
  summary.setAttribute("aria-label", "Actions for " + plainName(item.name));
  const list = document.createElement("div");
  const sealed = view.listing.sealed;
  if (item.kind !== "directory") {
    list.append(button("Versions" + (item.conflicts ? " and conflicts" : ""), () => {
      location.hash = `#/v/${segment(view.container)}/${segment(item.id)}` + (view.folder ? "/" + segment(view.folder) : "");
    }));
  }
  if (!sealed) list.append(button("Share with people…", () => shareWithPeople(item), "Share " + plainName(item.name) + " with people"));
  if (item.kind === "file" && item.uploaded) {
    list.append(button("Share link", () => sealed ? share(item, () => shareSealed(session, view.container, item)) : share(item), "Share a link to " + plainName(item.name)));
  }
  list.append(button("Rename", async () => {
    const name = prompt("New name", item.name);
    if (!name || name === item.name) return;
    await edits.move(item, { name });
    say("Renamed to " + plainName(name));
    refresh();
  }));
  list.append(button("Move", () => move(item)));
  list.append(button("Delete", async () => {
    if (!confirm(`Delete “${plainName(item.name)}”? It stays in Recently Deleted for 30 days.`)) return;
    await edits.remove(item);
    say("Deleted " + plainName(item.name));
    refresh();
  }));
  menu.append(summary, list);
  td.append(menu);
  return td;
}

// Moves into a folder beside it or up to the folder above.
async function move(item) {
  const select = $("move-target");
  const options = [];
  if (view.listing.path.length > 0) {
    const up = view.listing.path.length > 1 ? view.listing.path[view.listing.path.length - 2] : null;
    options.push({ value: up ? up.id : "", top: up === null, label: "↑ " + (up ? plainName(up.name) : "Top of the container") });
  }
  for (const folder of view.listing.items) {
    if (folder.kind === "directory" && folder.id !== item.id) options.push({ value: folder.id, top: false, label: plainName(folder.name) });
  }
  if (options.length === 0) return say("There is no folder to move it into: make one first.");
  select.replaceChildren(...options.map((option) => {
    const element = document.createElement("option");
    element.value = option.value;
    element.dataset.top = option.top ? "1" : "";
    element.textContent = option.label;
    return element;
  }));
  const dialog = $("move-dialog");
  $("move-title").textContent = "Move “" + plainName(item.name) + "”";
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  if (dialog.returnValue !== "move") return;
  const chosen = select.selectedOptions[0];
  await edits.move(item, chosen.dataset.top ? { toTop: true } : { parent: chosen.value });
  say("Moved " + plainName(item.name));
  refresh();
}

// MARK: Versions and conflicts

async function showVersions() {
  const base = `/web/api/containers/${segment(view.container)}/items/${segment(view.item)}`;
  let answer;
  try {
    answer = await api("GET", base + "/versions");
  } catch (error) {
    // Under Advanced the server cannot read the versions' records: this page opens them.
    if (!(error instanceof APIError && error.code === "sealedOnDevices")) throw error;
    answer = await versionsSealed(session, view.container, view.item);
  }
  const sealed = answer.sealed === true;
  const back = `#/c/${segment(view.container)}` + (view.folder ? "/" + segment(view.folder) : "");
  $("versions-crumbs").replaceChildren(crumb("iCloud Drive", "#/"), crumb(view.container, back));
  $("versions-title").replaceChildren(nameNode(answer.item.name));
  document.title = "Versions of " + plainName(answer.item.name) + " — Ubiquity";
  const versionRow = (version, label, actions) => {
    const row = document.createElement("tr");
    row.dataset.revision = version.revision;
    const device = document.createElement("td");
    device.append(nameNode(version.deviceName));
    const buttons = document.createElement("td");
    buttons.className = "buttons";
    if (version.uploaded && sealed) {
      buttons.append(button("Download", () => downloadVersionSealed(session, view.container, view.item, version.revision),
        "Download the version of " + formatDate(version.modificationDate)));
    } else if (version.uploaded) {
      const link = document.createElement("a");
      link.href = `${base}/revisions/${segment(version.revision)}/download`;
      link.setAttribute("download", "");
      link.textContent = "Download";
      buttons.append(link);
    } else {
      buttons.append(badge("waiting for its device"));
    }
    buttons.append(...actions);
    row.append(cell(label + formatDate(version.modificationDate)), device, cell(formatBytes(version.size), "num"), buttons);
    return row;
  };
  // (Under Advanced the page resolves as a device does, and signs what it made.)
  const keep = (version) => button("Keep this version", async () => {
    if (sealed) await resolveSealed(session, view.container, view.item, version.revision);
    else await api("POST", base + "/resolve", { keep: version.revision });
    say("Conflict resolved");
    refresh();
  }, "Keep the version saved on " + plainName(version.deviceName));
  $("conflicts-part").hidden = answer.conflicts.length === 0;
  $("conflict-rows").replaceChildren(
    versionRow(answer.current, "Current: ", [keep(answer.current)]),
    ...answer.conflicts.map((version) => versionRow(version, "Conflict: ", [keep(version)])));
  $("version-rows").replaceChildren(
    versionRow(answer.current, "Current: ", []),
    ...answer.earlier.map((version) => versionRow(version, "", [button("Restore", async () => {
      if (sealed) await restoreSealed(session, view.container, view.item, version.revision);
      else await api("POST", `${base}/revisions/${segment(version.revision)}/restore`);
      say("Restored the version of " + formatDate(version.modificationDate));
      refresh();
    }, "Restore the version of " + formatDate(version.modificationDate))])));
  show("versions");
}

// MARK: Recently Deleted

async function showDeleted() {
  const answer = await api("GET", "/web/api/deleted");
  $("deleted-note").textContent = `Items deleted on any device stay here for ${answer.retentionDays} days.`;
  const rows = answer.items.map((item) => {
    const row = document.createElement("tr");
    row.dataset.name = item.name;
    const name = document.createElement("td");
    name.append(nameNode(item.name));
    const buttons = document.createElement("td");
    buttons.append(button("Recover", async () => {
      await api("POST", "/web/api/deleted/restore", { revisions: [item.revision] });
      say("Recovered " + plainName(item.name));
      refresh();
    }, "Recover " + plainName(item.name)));
    const container = document.createElement("td");
    container.append(nameNode(item.container));
    row.append(name, container, cell(formatDate(item.deletedAt)), buttons);
    return row;
  });
  $("deleted-rows").replaceChildren(...rows);
  $("nothing-deleted").hidden = rows.length > 0;
  $("recover-all").hidden = rows.length === 0;
  $("recover-all").onclick = async () => {
    try {
      for (let start = 0; start < answer.items.length; start += 1000) {
        await api("POST", "/web/api/deleted/restore", { revisions: answer.items.slice(start, start + 1000).map((item) => item.revision) });
      }
      say("Recovered everything");
      refresh();
    } catch (error) {
      failed(error);
    }
  };
  document.title = "Recently Deleted — Ubiquity";
  show("deleted");
}

// MARK: Manage Storage, key-value stores, devices

async function showStorage() {
  const answer = await api("GET", "/web/api/storage");
  $("quota-text").textContent = `${formatBytes(answer.usedBytes)} of ${formatBytes(answer.quotaBytes)} used`;
  $("quota-bar").max = Math.max(1, answer.quotaBytes);
  $("quota-bar").value = Math.min(answer.usedBytes, answer.quotaBytes);
  $("storage-parts").textContent = `Documents ${formatBytes(answer.chunkBytes)}, key-value stores ${formatBytes(answer.keyValueBytes)}, `
    + `versions and records ${formatBytes(answer.metadataBytes)}` + (answer.pendingBytes ? `, still arriving ${formatBytes(answer.pendingBytes)}` : "");
  $("storage-rows").replaceChildren(...answer.containers.map((container) => {
    const row = document.createElement("tr");
    row.dataset.name = container.identifier;
    const name = document.createElement("td");
    name.append(nameNode(container.identifier));
    const buttons = document.createElement("td");
    const remove = button("Delete All…", () => deleteAll(container), "Delete all documents and data of " + plainName(container.identifier));
    remove.classList.add("danger");
    buttons.append(remove);
    row.append(name, cell(String(container.items), "num"), cell(formatBytes(container.bytes), "num"), buttons);
    return row;
  }));
  $("kv-store-rows").replaceChildren(...answer.keyValueStores.map((store) => {
    const row = document.createElement("tr");
    row.append(linkCell(store.identifier, "#/kv/" + segment(store.identifier)), cell(String(store.keys), "num"), cell(formatBytes(store.bytes), "num"));
    return row;
  }));
  document.title = "Manage Storage — Ubiquity";
  show("storage");
}

async function deleteAll(container) {
  const dialog = $("delete-all-dialog"), input = $("delete-all-confirm"), confirmButton = $("delete-all-button");
  $("delete-all-text").textContent = `Every document and all data of ${plainName(container.identifier)} (${container.items} items) `
    + "are deleted from iCloud and from every device. They stay in Recently Deleted for 30 days.";
  input.value = "";
  confirmButton.disabled = true;
  input.oninput = () => { confirmButton.disabled = input.value !== container.identifier; };
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  if (dialog.returnValue !== "delete" || input.value !== container.identifier) return;
  const answer = await api("POST", `/web/api/containers/${segment(container.identifier)}/delete-all`, { confirm: input.value });
  say(`Deleted ${answer.deleted} items`);
  refresh();
}

async function showKeyValues() {
  const answer = await api("GET", "/web/api/kv/" + segment(view.store));
  $("kv-title").replaceChildren(nameNode(answer.store));
  $("kv-rows").replaceChildren(...answer.entries.map((entry) => {
    const row = document.createElement("tr");
    row.dataset.name = entry.key;
    const key = document.createElement("td");
    key.append(nameNode(entry.key));
    const value = document.createElement("td");
    const plist = document.createElement("pre");
    plist.className = "plist";
    plist.textContent = entry.propertyList;
    value.append(plist);
    const device = document.createElement("td");
    device.append(nameNode(entry.deviceName), document.createElement("br"), formatDate(entry.timestamp));
    row.append(key, value, device);
    return row;
  }));
  $("kv-empty").hidden = answer.entries.length > 0 || answer.sealed > 0;
  $("kv-sealed").hidden = answer.sealed === 0;
  $("kv-sealed").textContent = `${answer.sealed} ${answer.sealed === 1 ? "value is" : "values are"} end-to-end encrypted: only your devices can read ${answer.sealed === 1 ? "it" : "them"}.`;
  document.title = plainName(answer.store) + " — Ubiquity";
  show("kv");
}

async function showDevices() {
  const answer = await api("GET", "/web/api/devices");
  $("device-rows").replaceChildren(...answer.devices.map((device) => {
    const row = document.createElement("tr");
    const name = nameCell(device.name, row, device.current ? "this browser" : null);
    const buttons = document.createElement("td");
    if (!device.current) {
      buttons.append(button("Sign out", async () => {
        if (!confirm(`Sign out “${plainName(device.name)}”? It stops syncing until it signs in again.`)) return;
        await api("POST", `/web/api/devices/${segment(device.id)}/revoke`);
        say("Signed out " + plainName(device.name));
        refresh();
      }, "Sign out " + plainName(device.name)));
    }
    row.append(name, cell(formatDate(device.created)), cell(device.lastSeen ? formatDate(device.lastSeen) : "—"), buttons);
    return row;
  }));
  await showProtection();
  document.title = "Devices — Ubiquity";
  show("devices");
}

// The account's data protection, as its roster says (read only: a device signs every change).
async function showProtection() {
  const answer = await api("GET", "/web/api/protection");
  const summary = $("protection-summary");
  if (!answer.custody) {
    summary.textContent = "Not set up yet: the account's first device sets its keys up when it signs in with ubiquity login.";
  } else if (answer.custody === "advanced") {
    summary.textContent = "Advanced Data Protection is on: only your devices" + (answer.recoveryKey ? " and your recovery key" : "") + " hold the account's keys. The server holds none.";
  } else {
    summary.textContent = "Standard Data Protection: the server also keeps a copy of the account's keys (so this page and password sign-in work)." + (answer.recoveryKey ? " A recovery key is set." : "");
  }
  if (answer.sealedOnly) {
    summary.textContent += " Everything is sealed: your devices refuse any name or value the server serves in plaintext.";
  }
  $("protection-devices").replaceChildren(...answer.devices.map((device) => {
    const item = document.createElement("li");
    item.dataset.name = device.name;
    item.textContent = plainName(device.name) + " — " + device.id.slice(0, 8);
    return item;
  }), ...(answer.webSessions || []).map((browser) => {
    // A browser let in under Advanced: its key signs the page's changes until its approval ends.
    const item = document.createElement("li");
    item.dataset.browser = browser.id;
    item.textContent = "A web browser, let in by " + plainName(browser.approver) + " until " + formatDate(browser.expires) + " — " + browser.id.slice(0, 8);
    return item;
  }));
  const waiting = $("protection-waiting");
  waiting.hidden = answer.waiting.length === 0;
  waiting.textContent = answer.waiting.map((request) => plainName(request.name) + (request.answered ? " waits for its code to be approved" : " asks to join")).join("; ");
}

// MARK: Administration (operators only: the server answers 403 to any other account)

function figure(term, value) {
  const dt = document.createElement("dt");
  dt.textContent = term;
  const dd = document.createElement("dd");
  dd.textContent = value;
  return [dt, dd];
}

function formatDuration(seconds) {
  const days = Math.floor(seconds / 86400), hours = Math.floor((seconds % 86400) / 3600), minutes = Math.floor((seconds % 3600) / 60);
  return days > 0 ? `${days} d ${hours} h` : hours > 0 ? `${hours} h ${minutes} min` : `${minutes} min`;
}

async function showAdmin() {
  const [health, answer] = await Promise.all([api("GET", "/web/api/admin/health"), api("GET", "/web/api/admin/accounts")]);
  const disk = health.diskTotalBytes ? `${formatBytes(health.diskFreeBytes)} free of ${formatBytes(health.diskTotalBytes)}` : "—";
  $("health").replaceChildren(...[
    ["Status", health.status], ["Database", health.database], ["Up for", formatDuration(health.uptimeSeconds)],
    ["Accounts", String(health.accounts)], ["Devices signed in", String(health.devices)], ["Connected now", String(health.connections)],
    ["Stored for accounts", `${formatBytes(health.usedBytes)} of ${formatBytes(health.quotaBytes)} in quotas`], ["Disk", disk],
    ["Requests", `${health.requests.toLocaleString()} (${health.clientErrors} refused, ${health.serverErrors} failed)`],
    ["Commits", health.commits.toLocaleString()], ["Received", formatBytes(health.chunkBytesReceived)],
  ].flatMap(([term, value]) => figure(term, value)));
  $("account-rows").replaceChildren(...answer.accounts.map((account) => {
    const row = document.createElement("tr");
    const name = nameCell(account.name, row, account.admin ? "operator" : null);
    const devices = document.createElement("td");
    const list = document.createElement("ul");
    list.className = "plain";
    for (const device of account.devices) {
      const item = document.createElement("li");
      item.append(nameNode(device.name), " ", badge(device.lastSeen ? "seen " + formatDate(device.lastSeen) : "not seen yet"), " ");
      item.append(button("Sign out", async () => {
        if (!confirm(`Sign “${plainName(device.name)}” of ${plainName(account.name)} out? It stops syncing until it signs in again.`)) return;
        await api("POST", `/web/api/admin/devices/${segment(device.id)}/revoke`);
        say("Signed out " + plainName(device.name));
        refresh();
      }, `Sign out ${plainName(device.name)} of ${plainName(account.name)}`));
      list.append(item);
    }
    devices.append(list);
    const actions = document.createElement("td");
    actions.append(button("Set quota", async () => {
      const typed = prompt(`Quota of ${plainName(account.name)} in GB:`, String(+(account.quotaBytes / 2 ** 30).toFixed(3)));
      if (typed === null) return;
      const gigabytes = Number(typed);
      if (!Number.isFinite(gigabytes) || gigabytes < 0) return say("A quota is a number of GB, 0 or more.");
      await api("POST", `/web/api/admin/accounts/${segment(account.name)}/quota`, { bytes: Math.round(gigabytes * 2 ** 30) });
      say(`Quota of ${plainName(account.name)} set`);
      refresh();
    }, "Set the quota of " + plainName(account.name)));
    row.append(name, cell(formatBytes(account.usedBytes), "num"), cell(formatBytes(account.quotaBytes), "num"),
      cell(account.items.toLocaleString(), "num"), devices, actions);
    return row;
  }));
  document.title = "Administration — Ubiquity";
  show("admin");
}

// MARK: Shared links

async function share(item, make = () => api("POST", itemPath(item) + "/links")) {
  const link = await make();
  const address = new URL(link.path, location.origin).href;
  $("link-address").value = address;
  $("link-expires").textContent = formatDate(link.expires);
  $("link-title").textContent = "Link to “" + plainName(item.name) + "”";
  $("link-copy").onclick = async () => {
    try { await navigator.clipboard.writeText(address); say("Link copied"); } catch (error) { $("link-address").select(); }
  };
  $("link-dialog").showModal();
  $("link-address").select();
}

async function showLinks() {
  const answer = await api("GET", "/web/api/links");
  const now = Date.now() / 1000;
  $("link-rows").replaceChildren(...answer.links.map((link) => {
    const row = document.createElement("tr");
    row.dataset.name = link.name;
    const name = document.createElement("td");
    name.append(nameNode(link.name));
    if (link.expires < now) name.append(badge("expired"));
    // Made on a device under Advanced: the key is in the link's address only, never here.
    if (link.sealed) name.append(badge("end-to-end encrypted"));
    // Made under Standard, before Advanced was turned on: its address carries no key.
    if (link.stopped) name.append(badge("stopped: Advanced Data Protection is on — share the file again"));
    const container = document.createElement("td");
    container.append(nameNode(link.container));
    const buttons = document.createElement("td");
    buttons.append(button("Revoke", async () => {
      await api("POST", `/web/api/links/${segment(link.id)}/revoke`);
      say("The link to " + plainName(link.name) + " no longer works");
      refresh();
    }, "Revoke the link to " + plainName(link.name)));
    row.append(name, container, cell(formatDate(link.created)), cell(formatDate(link.expires)), buttons);
    return row;
  }));
  $("no-links").hidden = answer.links.length > 0;
  document.title = "Shared Links — Ubiquity";
  show("links");
}

// MARK: Sharing with people (docs/Sharing.md)

const permission = (role) => role === "readOnly" ? "Can view" : "Can make changes";

// The Share dialog of an item: invite an account by name (answered alike whether or not it
// exists), see who it is shared with, remove someone, stop sharing.
async function shareWithPeople(item) {
  const container = view.container, dialog = $("share-dialog");
  let share = null;
  const owned = async () => (await api("GET", "/web/api/shares")).owned.find((s) => s.container === container && s.item === item.id) || null;
  const render = () => {
    $("share-title").textContent = "Share “" + plainName(item.name) + "”";
    const people = (share && share.participants || []).filter((p) => p.state === "invited" || p.state === "accepted");
    $("share-people").replaceChildren(...(people.length ? people.map((person) => {
      const line = document.createElement("li");
      line.dataset.name = person.name;
      line.append(nameNode(person.name), " — " + permission(person.role) + (person.state === "invited" ? " (invited)" : ""));
      line.append(button("Remove", async () => {
        await api("DELETE", `/web/api/shares/${segment(share.id)}/participants/${segment(person.id)}`);
        say(plainName(person.name) + " no longer has it");
        share = await owned();
        render();
      }, "Remove " + plainName(person.name)));
      return line;
    }) : [Object.assign(document.createElement("li"), { textContent: "Only you", className: "muted" })]));
    $("share-stop").hidden = !share;
  };
  share = await owned();
  $("share-name").value = "";
  $("share-read-only").checked = false;
  $("share-error").textContent = "";
  render();
  $("share-invite").onclick = async () => {
    const name = $("share-name").value.trim();
    if (!name) { $("share-error").textContent = "Type the name of the account to share with."; return; }
    try {
      const made = await api("POST", "/web/api/shares", { container, item: item.id });
      await api("POST", `/web/api/shares/${segment(made.id)}/participants`, { name, role: $("share-read-only").checked ? "readOnly" : "readWrite" });
      $("share-name").value = "";
      $("share-error").textContent = "";
      say("Invited " + plainName(name));
      share = await owned();
      render();
    } catch (error) {
      $("share-error").textContent = error.message || String(error);
    }
  };
  $("share-stop").onclick = async () => {
    if (!share || !confirm(`Stop sharing “${plainName(item.name)}”? It leaves everyone else's devices; nothing of yours is touched.`)) return;
    await api("DELETE", `/web/api/shares/${segment(share.id)}`);
    say("Stopped sharing " + plainName(item.name));
    share = null;
    render();
  };
  dialog.returnValue = "";
  dialog.showModal();
  await new Promise((resolve) => dialog.addEventListener("close", resolve, { once: true }));
  refresh();
}

// Shared with Others: invitations to answer, what is shared with this account, what it shares.
async function showShared() {
  const answer = await api("GET", "/web/api/shares");
  const named = (share) => share.name || "(sealed)";
  $("invitation-rows").replaceChildren(...answer.invitations.map((share) => {
    const row = document.createElement("tr");
    const buttons = document.createElement("td");
    buttons.append(button("Accept", async () => {
      await api("POST", `/web/api/shares/invitations/${segment(share.invitation)}/accept`);
      say("Accepted " + plainName(named(share)) + ": it appears on your devices");
      refresh();
    }, "Accept " + plainName(named(share))), button("Decline", async () => {
      await api("POST", `/web/api/shares/invitations/${segment(share.invitation)}/decline`);
      say("Declined " + plainName(named(share)));
      refresh();
    }, "Decline " + plainName(named(share))));
    row.append(nameCell(named(share), row), cell(share.owner), cell(permission(share.role)), cell(share.expires ? formatDate(share.expires) : ""), buttons);
    return row;
  }));
  $("no-invitations").hidden = answer.invitations.length > 0;
  $("joined-rows").replaceChildren(...answer.joined.map((share) => {
    const row = document.createElement("tr");
    row.dataset.name = named(share);
    const buttons = document.createElement("td");
    buttons.append(button("Leave", async () => {
      if (!confirm(`Leave “${plainName(named(share))}”? It leaves your devices.`)) return;
      await api("POST", `/web/api/shares/${segment(share.id)}/leave`);
      say("Left " + plainName(named(share)));
      refresh();
    }, "Leave " + plainName(named(share))));
    row.append(linkCell(named(share), "#/s/" + segment(share.id)), cell(share.owner), cell(permission(share.role)), buttons);
    return row;
  }));
  $("no-joined").hidden = answer.joined.length > 0;
  $("owned-rows").replaceChildren(...answer.owned.map((share) => {
    const row = document.createElement("tr");
    const people = (share.participants || []).filter((p) => p.state === "invited" || p.state === "accepted")
      .map((p) => p.name + " (" + permission(p.role).toLowerCase() + (p.state === "invited" ? ", invited" : "") + ")");
    const buttons = document.createElement("td");
    buttons.append(button("Stop sharing", async () => {
      if (!confirm(`Stop sharing “${plainName(named(share))}”?`)) return;
      await api("DELETE", `/web/api/shares/${segment(share.id)}`);
      say("Stopped sharing " + plainName(named(share)));
      refresh();
    }, "Stop sharing " + plainName(named(share))));
    row.append(nameCell(named(share), row), cell(share.container), cell(people.length ? people.join(", ") : "nobody"), buttons);
    return row;
  }));
  $("no-owned").hidden = answer.owned.length > 0;
  document.title = "Shared with Others — Ubiquity";
  show("shared");
}

// A folder of a share another account shared with this one: its items, read through the share.
async function showShareFolder() {
  const shares = await api("GET", "/web/api/shares");
  const share = shares.joined.find((s) => s.id === view.share) || shares.owned.find((s) => s.id === view.share);
  if (!share) { location.hash = "#/shared"; return; }
  const items = new Map();
  let since = 0;
  for (;;) {
    const page = await api("GET", `/web/api/shares/${segment(share.id)}/changes?since=${since}&limit=5000&brief=true`);
    for (const item of page.items) items.set(item.id, item);
    if (!page.more) break;
    since = page.next ?? page.items[page.items.length - 1].sequence;
  }
  const folder = view.folder || share.item;
  const path = [];
  for (let id = folder, guard = 0; id && items.has(id) && guard < 256; guard++) {
    path.unshift(items.get(id));
    if (id === share.item) break;
    id = items.get(id).parent;
  }
  const crumbs = [crumb("Shared with Others", "#/shared"), ...path.map((item) => crumb(item.name, `#/s/${segment(share.id)}/${segment(item.id)}`))];
  $("share-crumbs").replaceChildren(...crumbs);
  const here = items.get(folder);
  $("share-folder-title").replaceChildren(nameNode(here ? here.name : named(share)));
  $("share-folder-note").textContent = `Shared by ${share.owner} · ${share.role ? permission(share.role) : "yours"}`;
  const children = [...items.values()].filter((item) => !item.deleted && item.parent === folder)
    .sort((a, b) => (a.kind === "directory") === (b.kind === "directory") ? a.name.localeCompare(b.name) : (a.kind === "directory" ? -1 : 1));
  const shown = here && here.kind !== "directory" ? [here] : children;
  $("share-item-rows").replaceChildren(...shown.map((item) => {
    const row = document.createElement("tr");
    row.dataset.name = item.name;
    const name = document.createElement("td");
    const link = document.createElement("a");
    link.append(nameNode(item.name));
    if (item.kind === "directory") {
      link.href = `#/s/${segment(share.id)}/${segment(item.id)}`;
      link.classList.add("folder");
    } else {
      link.href = `/web/api/shares/${segment(share.id)}/items/${segment(item.id)}/download`;
      link.setAttribute("download", "");
    }
    name.append(link);
    const device = document.createElement("td");
    device.append(nameNode(item.deviceName));
    row.append(name, cell(formatDate(item.modificationDate)), cell(item.kind === "directory" ? "—" : formatBytes(item.size), "num"), device);
    return row;
  }));
  $("share-folder-empty").hidden = shown.length > 0;
  document.title = plainName(here ? here.name : named(share)) + " — Ubiquity";
  show("share-folder");

  function named(s) { return s.name || "(sealed)"; }
}

let filterTimer = null;
$("filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => { view.listing = null; refresh(); }, 150);
});
$("sort").addEventListener("change", () => { view.listing = null; refresh(); });
$("more-items").addEventListener("click", () => showMore().catch(failed));

// MARK: Uploads and folders

function progressRow(file) {
  const row = document.createElement("li");
  const label = document.createElement("span");
  label.append(nameNode(file.webkitRelativePath || file.name));
  const bar = document.createElement("progress");
  bar.max = Math.max(1, file.size);
  bar.value = 0;
  bar.setAttribute("aria-label", "Uploading " + plainName(file.name));
  row.append(label, bar);
  $("uploads").append(row);
  return { bar, row };
}

async function upload(file, folder) {
  const { bar, row } = progressRow(file);
  try {
    // (Under Advanced the page cuts and seals the file itself.)
    if (view.listing?.sealed) await uploadSealed(session, view.container, folder || null, file, (sent) => { bar.value = sent; });
    else await uploadFile(view.container, folder, file, (sent) => { bar.value = sent; });
    row.remove();
    say("Uploaded " + plainName(file.name));
  } catch (error) {
    row.append(badge("failed: " + error.message));
  }
}

$("upload-files").addEventListener("change", async (event) => {
  const files = [...event.target.files];
  event.target.value = "";
  const folder = view.folder;
  for (const file of files) await upload(file, folder);
  refresh();
});

$("upload-folder").addEventListener("change", async (event) => {
  const files = [...event.target.files];
  event.target.value = "";
  try {
    // (Under Advanced the page makes the folders itself, as it makes the files.)
    if (view.listing?.sealed) await uploadTree(view.container, view.folder, files, upload, (parent, name) => folderSealed(session, view.container, parent || null, name));
    else await uploadTree(view.container, view.folder, files, upload);
  } catch (error) {
    failed(error);
  }
  refresh();
});

$("new-folder").addEventListener("click", async () => {
  const name = prompt("Name of the new folder");
  if (!name) return;
  try {
    if (view.listing?.sealed) await newFolderSealed(session, view.container, view.folder || null, name);
    else await makeFolder(view.container, view.folder, name);
    refresh();
  } catch (error) {
    failed(error);
  }
});

start();
