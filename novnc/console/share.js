// A share link's page: the run's live desktop (view only, enforced by the server) and its
// timeline, under the link's cookie (scoped to this run's /share path). No API key, no sign-in.
import { el, duration } from '/assets/console/api.js';
import { Desktop, desktopMarkup } from '/assets/console/desktop.js';
import { Timeline, TERMINAL } from '/assets/console/timeline.js';

const $ = (id) => document.getElementById(id);
const runId = decodeURIComponent(location.pathname.split('/')[3] || '');
const base = `/share/runs/${encodeURIComponent(runId)}`;
let run = null;
let steps = 0;
let desktop = null;

// The run as the link shows it, or {ended: message} when the link no longer opens it.
async function read() {
  let response;
  try {
    response = await fetch(`${base}/run`, { credentials: 'same-origin', cache: 'no-store' });
  } catch {
    return { retry: 'the server cannot be reached' };
  }
  if (response.ok) return { run: await response.json() };
  const body = await response.json().catch(() => ({}));
  const message = body?.error?.message || `the server answered ${response.status}`;
  if ([401, 403, 404, 410].includes(response.status)) return { ended: message };
  return { retry: message };
}

function ended(message) {
  desktop?.stop(`This link no longer opens the desktop: ${message}.`);
  document.title = 'Share link ended · Agentbox';
  $('status').textContent = 'link ended';
  $('status').className = 'pill ended';
  $('error').textContent = `This share link no longer works: ${message}. Ask whoever sent it for a new one.`;
}

function show() {
  $('task').textContent = run.task;
  $('status').textContent = run.status.replaceAll('_', ' ');
  $('status').className = `pill ${run.status}`;
  $('expires').textContent = `Link expires ${new Date(run.link_expires_at).toLocaleString()}`;
  if (TERMINAL.has(run.status)) {
    $('notice').textContent = `The run ${run.status === 'completed' ? 'completed' : `ended (${run.status})`}.${run.answer ? ` Answer: ${run.answer}` : ''}`;
  } else if (run.status === 'paused') {
    $('notice').textContent = 'A person has control of the desktop right now.';
  } else {
    $('notice').textContent = '';
  }
}

function tick() {
  if (!run) return;
  const end = run.ended_at ? Date.parse(run.ended_at) : Date.now();
  $('elapsed').textContent = duration(end - Date.parse(run.created_at));
}

async function refresh() {
  const answer = await read();
  if (answer.ended) { ended(answer.ended); return false; }
  if (answer.run) { run = answer.run; show(); }
  return true;
}

// The first read, asked again while the failure may pass (the server unreachable for a moment,
// a 5xx such as a busy database, a 429), as the run page does: one failed read must not leave the
// page at "loading" for good.
async function firstRead() {
  for (let attempt = 0; ; attempt += 1) {
    const answer = await read();
    if (!answer.retry || attempt >= 20) return answer;
    $('error').textContent = `Could not load the run yet: ${answer.retry}. Trying again…`;
    await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 5000)));
  }
}

async function main() {
  const answer = await firstRead();
  if (answer.run) $('error').textContent = '';
  if (answer.ended) {
    $('content').hidden = true;
    $('facts').hidden = true;
    ended(answer.ended);
    return;
  }
  if (!answer.run) {
    $('error').textContent = `Could not load the run: ${answer.retry}. Reload to try again.`;
    return;
  }
  run = answer.run;
  show();
  tick();
  setInterval(tick, 1000);
  if (run.sandbox_live) {
    const root = desktopMarkup();
    $('desktop-section').replaceChildren(root);
    desktop = new Desktop(root, `${base}/websockify`, {
      why: async () => {
        const now = await read();
        if (now.ended) return `This link no longer opens the desktop: ${now.ended}.`;
        if (now.run?.sandbox_paused) return 'The sandbox was paused: the desktop comes back when it is resumed (reload then).';
        if (now.run && !now.run.sandbox_live) return 'The sandbox has ended: the desktop is gone. The timeline stays readable.';
        return null;
      },
    });
    desktop.setControl(false, 'View only');
    desktop.start();
  } else if (run.sandbox_paused) {
    $('desktop-section').replaceChildren(el('p', { class: 'notice' },
      'The sandbox of this run is paused: the live desktop comes back when it is resumed (reload then).'));
  } else {
    $('desktop-section').replaceChildren(el('p', { class: 'notice warn' },
      'The sandbox of this run has ended: the live desktop is gone. The timeline stays readable.'));
  }
  const timeline = new Timeline($('timeline'), {
    streamState: $('stream'),
    artifactBase: `${base}/artifacts`,
    onEvent: (event) => {
      if (event.type === 'action.finished') { steps += 1; $('steps').textContent = String(steps); }
      if (event.type === 'run.status' || event.type.startsWith('control.')) refresh();
    },
    onEnd: (why) => { refresh(); if (why !== 'finished') $('stream').textContent = 'Stopped'; },
  });
  timeline.follow(`${base}/events`);
}

main();
