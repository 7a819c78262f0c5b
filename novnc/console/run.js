// The run page: current state first (status, step, elapsed, the controls and what they lead
// to), the live desktop large, then the timeline, files and the share link.
import { api, shell, el, duration, pill } from '/assets/console/api.js';
import { Desktop, desktopMarkup } from '/assets/console/desktop.js';
import { Timeline, TERMINAL, renderArtifacts } from '/assets/console/timeline.js';

const runId = decodeURIComponent(location.pathname.split('/')[2] || '');
const $ = (id) => document.getElementById(id);
const base = `/v1/runs/${encodeURIComponent(runId)}`;
let run = null;
let desktop = null;
let steps = 0;
let busy = false;

const EXPLAIN = {
  queued: 'Waiting for a sandbox. Cancel ends the run before it starts.',
  running: 'The agent is driving; the desktop is view-only. Take over pauses it after its current action and gives you the mouse and keyboard.',
  paused: 'You have control: your mouse and keyboard reach the desktop. Hand back lets the agent continue from a fresh screenshot.',
  waiting_for_input: 'The agent is waiting for your answer below.',
  auth_required: 'The remote agent needs you to sign in with it (see the timeline). Once you have, say so below.',
  canceling: 'The cancel was sent to the remote agent; the run ends when it confirms.',
};

function say(text) { $('notice').textContent = text; }
function fail(text) { $('error').textContent = text; }

function showStatus() {
  const status = run.status;
  const badge = $('status');
  badge.textContent = status.replaceAll('_', ' ');
  badge.className = `pill ${status}`;
  document.title = `${status.replaceAll('_', ' ')} · ${run.task.slice(0, 40)} · Agentbox`;
  const terminal = TERMINAL.has(status);
  // A remote agent or the conformance executor has no desktop to take.
  const desktopless = run.model.startsWith('a2a:') || run.model === 'conformance';
  $('takeover').hidden = desktopless || !(status === 'running' || status === 'waiting_for_input');
  $('handback').hidden = status !== 'paused';
  $('note').hidden = status !== 'paused';
  $('cancel').hidden = terminal;
  $('explain').textContent = terminal ? '' : (EXPLAIN[status] || '');
  $('input-panel').hidden = !(status === 'waiting_for_input' || status === 'auth_required');
  if (terminal) {
    const how = status === 'completed' ? 'The run completed.' : status === 'failed'
      ? `The run failed${run.reason ? `: ${run.reason}` : '.'}`
      : status === 'unknown' ? `How the run ended is not known${run.reason ? `: ${run.reason}` : '.'}`
        : 'The run was canceled.';
    say(`${how} ${run.answer ? `Answer: ${run.answer}` : ''} The timeline and files stay readable.`.trim());
  }
  // While the agent drives, the desktop is view-only (the server drops input anyway).
  if (desktop) {
    const agentDrives = status === 'running' || status === 'queued' || status === 'waiting_for_input';
    const label = status === 'waiting_for_input' ? 'View only: the agent waits for your answer'
      : status === 'queued' ? 'View only: the run is starting' : 'View only: the agent is driving';
    desktop.setControl(!agentDrives, agentDrives ? label : 'You have control');
  }
}

function tick() {
  if (!run) return;
  const end = run.ended_at ? Date.parse(run.ended_at) : Date.now();
  $('elapsed').textContent = duration(end - Date.parse(run.created_at));
}

async function refresh() {
  try {
    run = await api(base);
    showStatus();
    await ensureDesktop();
  } catch (error) {
    fail(`Could not read the run: ${error.message}`);
  }
}

async function refreshArtifacts() {
  try {
    const { artifacts } = await api(`${base}/artifacts`);
    renderArtifacts($('artifacts'), artifacts, `${base}/artifacts`);
  } catch (error) {
    fail(`Could not list the files: ${error.message}`);
  }
}

// The desktop, while the sandbox lives; otherwise say it is gone.
async function ensureDesktop() {
  if (desktop || !run.sandbox_id) return;
  const section = $('desktop-section');
  let sandbox;
  try {
    sandbox = await api(`/v1/sandboxes/${encodeURIComponent(run.sandbox_id)}`);
  } catch (error) {
    if (error.status === 404) {
      section.replaceChildren(el('p', { class: 'notice warn' },
        'The sandbox of this run has ended and was removed: the live desktop is gone. The timeline and files stay readable.'));
      return;
    }
    throw error;
  }
  $('sandbox').replaceChildren(el('a', { href: `/sandboxes/${encodeURIComponent(sandbox.id)}` }, sandbox.id));
  if (sandbox.status !== 'ready' && sandbox.status !== 'degraded') {
    section.replaceChildren(el('p', { class: 'notice warn' }, `The sandbox is ${sandbox.status}: no live desktop.`));
    return;
  }
  const root = desktopMarkup();
  section.replaceChildren(root);
  desktop = new Desktop(root, `/v1/sandboxes/${encodeURIComponent(sandbox.id)}/vnc/websockify`, {
    why: async () => {
      try {
        const now = await api(`/v1/sandboxes/${encodeURIComponent(sandbox.id)}`);
        return now.status === 'ready' || now.status === 'degraded' ? null : `The sandbox is ${now.status}: the desktop is gone.`;
      } catch (error) {
        if (error.status === 404) return 'The sandbox has ended and was removed: the desktop is gone. The timeline and files stay readable.';
        if (error.status === 401) return 'Signed out.';
        return null;
      }
    },
  });
  showStatus();
  desktop.start();
}

async function act(path, body, doing) {
  if (busy) return;
  busy = true;
  $('error').textContent = '';
  say(doing);
  for (const id of ['takeover', 'handback', 'cancel']) $(id).disabled = true;
  try {
    run = await api(`${base}/${path}`, { method: 'POST', body });
    say('');
    showStatus();
  } catch (error) {
    say('');
    fail(`${error.message}`);
  } finally {
    busy = false;
    for (const id of ['takeover', 'handback', 'cancel']) $(id).disabled = false;
  }
}

$('takeover').addEventListener('click', () => act('takeover', undefined, 'Taking over: waiting for the agent to finish its current action…'));
$('handback').addEventListener('click', () => {
  const note = $('note').value.trim();
  act('handback', note ? { note } : {}, 'Handing back…').then(() => { $('note').value = ''; });
});
$('cancel').addEventListener('click', () => {
  if (confirm('Cancel this run? The agent stops after its current action.')) act('cancel', undefined, 'Canceling…');
});
$('input-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const text = $('answer').value.trim();
  if (!text) { fail('Write an answer first.'); return; }
  act('input', { text }, 'Sending your answer…').then(() => { $('answer').value = ''; });
});

// ---- share links ----
// Each link is bound to this run (made from its route, signed with its id): it opens this run's
// page and nothing else, and the list shows the links that still open.
function shareRow(share, url) {
  const revoke = el('button', { type: 'button', class: 'danger' }, 'Revoke');
  const parts = [];
  if (url) {
    const input = el('input', { type: 'text', readonly: true, value: url, 'aria-label': 'Share link' });
    const copy = el('button', { type: 'button' }, 'Copy');
    copy.addEventListener('click', async () => {
      input.select();
      try { await navigator.clipboard.writeText(url); copy.textContent = 'Copied'; } catch { document.execCommand?.('copy'); }
    });
    parts.push(input, copy);
  } else {
    parts.push(el('span', { class: 'when' }, `Link made ${new Date(share.created_at).toLocaleString()}`));
  }
  const row = el('li', { class: 'note' }, el('div', { class: 'share-link' }, ...parts, revoke),
    el('div', { class: 'when' }, `View only · expires ${new Date(share.expires_at).toLocaleString()}`));
  row.dataset.shareId = share.id;
  revoke.addEventListener('click', async () => {
    try {
      await api(`${base}/shares/${encodeURIComponent(share.id)}`, { method: 'DELETE' });
      row.replaceChildren(el('div', { class: 'when' }, 'Revoked: the link no longer opens, and anyone watching through it was disconnected.'));
    } catch (error) { fail(`Could not revoke: ${error.message}`); }
  });
  return row;
}

async function listShares() {
  try {
    const { shares } = await api(`${base}/shares`);
    const shown = new Set([...$('share-links').children].map((row) => row.dataset.shareId));
    for (const share of shares) if (!shown.has(share.id)) $('share-links').append(shareRow(share));
  } catch (error) { fail(`Could not list the share links: ${error.message}`); }
}

$('share-create').addEventListener('click', async () => {
  try {
    const share = await api(`${base}/shares`, {
      method: 'POST', body: { ttl_secs: Number($('share-ttl').value) },
    });
    $('share-links').prepend(shareRow(share, share.url));
  } catch (error) {
    fail(`Could not create a link: ${error.message}`);
  }
});
$('share-revoke-all').addEventListener('click', async () => {
  try {
    const { revoked } = await api(`${base}/shares`, { method: 'DELETE' });
    say(`Revoked ${revoked} link${revoked === 1 ? '' : 's'} to this run.`);
    $('share-links').replaceChildren();
  } catch (error) { fail(`Could not revoke: ${error.message}`); }
});
listShares();

// The first read of the run, asked again while the failure may pass (the orchestrator
// unreachable for a moment, a 5xx, a 429): one failed read left the page at "loading" for good.
async function firstRead() {
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await api(base);
    } catch (error) {
      fail(`Could not read the run: ${error.message}`);
      const passing = error.status === 0 || error.status === 429 || error.status >= 500;
      if (!passing || attempt >= 20) return null;
      await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 5000)));
    }
  }
}

async function main() {
  shell();
  if (!(await firstRead())) return;
  $('error').textContent = '';
  await refresh();
  if (!run) return;
  $('task').textContent = run.task;
  $('model').textContent = run.model;
  if (!run.sandbox_id) $('sandbox').textContent = 'not yet';
  tick();
  setInterval(tick, 1000);
  await refreshArtifacts();
  const timeline = new Timeline($('timeline'), {
    streamState: $('stream'),
    artifactBase: `${base}/artifacts`,
    onEvent: (event) => {
      if (event.type === 'action.finished') {
        steps += 1;
        $('steps').textContent = String(steps);
      }
      if (event.type === 'input.requested') $('question').textContent = event.question;
      if (event.type === 'artifact.created') refreshArtifacts();
      if (event.type === 'run.status' || event.type.startsWith('control.')) refresh();
    },
    onEnd: async (why) => {
      if (why === 'finished') { refresh(); refreshArtifacts(); return; }
      try { await api('/console/session', { quiet401: true }); } catch (error) {
        if (error.status === 401) { fail('You were signed out: the live timeline stopped. Sign in again to continue.'); return; }
      }
      fail('The timeline stream was refused by the server; reload the page to try again.');
    },
  });
  timeline.follow(`${base}/events`);
}

main();
