// What every console page shares: calls to the REST API with the console's sign-in (an
// HttpOnly cookie the page never sees), the header's sign-out, and formatting.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// A path on the console's own origin to go to after signing in; anything else becomes '/'.
// The check is the browser's own URL parser, not a look at the text: browsers drop tabs and
// line breaks from a URL and read a backslash as '/', so '/<tab>/host' is '//host', another
// origin.
export function safeNext(next) {
  if (typeof next !== 'string' || !next.startsWith('/')) {
    return '/';
  }
  let url;
  try {
    url = new URL(next, location.origin);
  } catch {
    return '/';
  }
  if (url.origin !== location.origin) {
    return '/';
  }
  return url.pathname + url.search + url.hash;
}

export function toSignIn() {
  const next = location.pathname + location.search;
  location.assign(`/sign-in?${new URLSearchParams({ next })}`);
}

// Calls the API; resolves with the JSON body (or null), rejects with an ApiError. A 401 (the
// sign-in ended) goes to the sign-in page unless `quiet401`.
export async function api(path, { method = 'GET', body, quiet401 = false } = {}) {
  const init = { method, credentials: 'same-origin', cache: 'no-store', headers: {} };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'unreachable', 'the orchestrator cannot be reached');
  }
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && !quiet401) {
      toSignIn();
    }
    const message = data?.error?.message || `the server answered ${response.status}`;
    throw new ApiError(response.status, data?.error?.code || 'error', message);
  }
  return data;
}

// Fills the header: who is signed in, and the sign-out button.
export async function shell() {
  const who = document.getElementById('who');
  const button = document.getElementById('sign-out');
  button?.addEventListener('click', async () => {
    button.disabled = true;
    await fetch('/console/session', { method: 'DELETE', credentials: 'same-origin' }).catch(() => {});
    location.assign('/sign-in');
  });
  try {
    const session = await api('/console/session');
    if (who) who.textContent = `Key ${session.key_id}${session.is_admin ? ' (admin)' : ''}`;
    return session;
  } catch {
    return null;
  }
}

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function pill(status, label) {
  return el('span', { class: `pill ${status}` }, label || status.replaceAll('_', ' '));
}

// "3 min", "2 h 5 min", "40 s".
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m % 60} min`;
}

export function ago(iso) {
  if (!iso) return '';
  return `${duration(Date.now() - Date.parse(iso))} ago`;
}

export function until(iso) {
  if (!iso) return '';
  const left = Date.parse(iso) - Date.now();
  return left <= 0 ? 'now' : `in ${duration(left)}`;
}

export function clock(iso) {
  if (!iso) return '';
  return new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}
