// The live-desktop page: noVNC's RFB over the orchestrator's VNC WebSocket for one sandbox.
// The viewer credential is an HttpOnly cookie scoped to this sandbox's /vnc path; the page never
// sees it. What the session may do (view or control) comes from /vnc/session.
import RFB from '/assets/vendor/novnc/core/rfb.js';

const match = location.pathname.match(/^\/v1\/sandboxes\/([^/]+)\/vnc\/?/);
const sandboxId = match ? decodeURIComponent(match[1]) : '';
const base = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/vnc`;
const stateEl = document.getElementById('state');
const modeEl = document.getElementById('mode');
const screenEl = document.getElementById('screen');
document.getElementById('sandbox').textContent = sandboxId;

let rfb = null;
let retryDelay = 1000;
/** How often a viewer of a sandbox that is not ready (paused, say) looks again. */
const WAITING_RETRY_MS = 5000;

function say(text, isError = false) {
  stateEl.textContent = text;
  stateEl.classList.toggle('error', isError);
}

async function session() {
  const response = await fetch(`${base}/session`, { credentials: 'same-origin', cache: 'no-store' });
  if (response.status === 401 || response.status === 403 || response.status === 404) {
    const body = await response.json().catch(() => ({}));
    const message = body?.error?.message || 'this viewer link is no longer valid';
    return { ended: true, message };
  }
  if (response.status === 409) {
    // Not ready: paused (frozen until someone resumes it), or starting, or going away.
    const body = await response.json().catch(() => ({}));
    const message = body?.error?.message || 'the sandbox is not ready';
    return { waiting: true, message };
  }
  if (!response.ok) {
    return { retry: true, message: `the orchestrator answered ${response.status}` };
  }
  return response.json();
}

async function connect() {
  say('Connecting…');
  let info;
  try {
    info = await session();
  } catch {
    info = { retry: true, message: 'the orchestrator cannot be reached' };
  }
  if (info.ended) {
    say(`Ended: ${info.message}`, true);
    return;
  }
  if (info.retry) {
    scheduleRetry(info.message);
    return;
  }
  if (info.waiting) {
    // A paused sandbox is not an error: show its state and look again every few seconds.
    say(/\bpaused\b/.test(info.message) ? `Paused: ${info.message}` : info.message);
    connectLater(WAITING_RETRY_MS);
    return;
  }
  const viewOnly = info.scope !== 'control';
  modeEl.textContent = viewOnly ? 'View only' : 'In control';
  modeEl.className = `mode ${viewOnly ? 'view' : 'control'}`;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  rfb = new RFB(screenEl, `${scheme}//${location.host}${base}/websockify`, { shared: true });
  rfb.viewOnly = viewOnly;
  rfb.scaleViewport = true;
  rfb.background = '#111417';
  rfb.addEventListener('connect', () => {
    retryDelay = 1000;
    say(viewOnly ? 'Live (watching)' : 'Live');
  });
  rfb.addEventListener('disconnect', (event) => {
    rfb = null;
    if (event.detail.clean) {
      // Closed by the server: find out why before trying again.
      connectLater(500);
    } else {
      scheduleRetry('connection lost');
    }
  });
}

function connectLater(delay) {
  setTimeout(connect, delay);
}

function scheduleRetry(why) {
  const seconds = Math.round(retryDelay / 1000);
  say(`${why}; retrying in ${seconds} s`, true);
  connectLater(retryDelay);
  retryDelay = Math.min(retryDelay * 2, 30000);
}

document.getElementById('fullscreen').addEventListener('click', () => {
  if (document.fullscreenElement) {
    document.exitFullscreen();
  } else {
    document.documentElement.requestFullscreen?.();
  }
});

connect();
