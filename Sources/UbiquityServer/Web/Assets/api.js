// The web interface's requests: JSON in and out (or raw bytes for an upload's part), the
// page's header and the session's CSRF token on every change, errors as APIError.

let csrf = "";

/** Remembers the session's CSRF token (from GET /web/api/session or the sign-in). */
export function setCSRF(token) { csrf = token || ""; }

/** A refused request: its HTTP status and the server's error code and message. */
export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Sends a request to the web API and answers its JSON (null for 204). */
export async function api(method, path, body) {
  const headers = {};
  if (method !== "GET" && method !== "HEAD") {
    headers["X-Ubiquity-Web"] = "1";
    if (csrf) headers["X-CSRF-Token"] = csrf;
  }
  let payload;
  if (body instanceof Blob || body instanceof ArrayBuffer) {
    payload = body;
    headers["Content-Type"] = "application/octet-stream";
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body: payload, credentials: "same-origin", cache: "no-store" });
  } catch (error) {
    throw new APIError(0, "network", "the server cannot be reached");
  }
  if (!response.ok) {
    let code = "http" + response.status, message = response.statusText || "the request failed";
    try {
      const answer = await response.json();
      code = answer.error.code;
      message = answer.error.message;
    } catch (ignored) { /* not JSON: the status says it */ }
    throw new APIError(response.status, code, message);
  }
  return response.status === 204 ? null : response.json();
}

/** A path segment, escaped. */
export function segment(text) { return encodeURIComponent(text); }
