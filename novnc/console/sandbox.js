// One sandbox's live desktop. With no run of an agent in it, the person has control; while a
// run's agent drives, the desktop is view-only (and the server drops input anyway).
import { api, shell, el, pill, ago, until } from '/assets/console/api.js';
import { Desktop, desktopMarkup } from '/assets/console/desktop.js';

const $ = (id) => document.getElementById(id);
const sandboxId = decodeURIComponent(location.pathname.split('/')[2] || '');
const path = `/v1/sandboxes/${encodeURIComponent(sandboxId)}`;
let desktop = null;

async function activeRun() {
  const { runs } = await api('/v1/runs');
  return runs.find((r) => r.sandbox_id === sandboxId && !['completed', 'failed', 'canceled'].includes(r.status));
}

async function update() {
  let sandbox;
  try {
    sandbox = await api(path);
  } catch (error) {
    if (error.status === 404) {
      desktop?.stop('The sandbox has ended and was removed.');
      $('status').replaceWith(pill('ended', 'removed'));
      return false;
    }
    $('error').textContent = `Could not read the sandbox: ${error.message}`;
    return true;
  }
  $('title').textContent = sandbox.id;
  const status = $('status');
  status.textContent = sandbox.status;
  status.className = `pill ${sandbox.status}`;
  $('age').textContent = ago(sandbox.created_at);
  $('expires').textContent = until(sandbox.expires_at);
  $('image').textContent = sandbox.image || '';
  const run = await activeRun().catch(() => null);
  $('notice').replaceChildren();
  if (run) {
    $('notice').append(`A run's agent is driving this desktop, so it is view-only here. `,
      el('a', { href: `/runs/${encodeURIComponent(run.id)}` }, 'Open the run'), ' to take over.');
  }
  if (desktop) desktop.setControl(!run, run ? 'View only: an agent is driving' : 'You have control');
  return sandbox;
}

// The first read, asked again while the failure may pass (the orchestrator unreachable for a
// moment, a 5xx): one failed read left the page without a desktop for good.
async function firstUpdate() {
  for (let attempt = 0; ; attempt += 1) {
    const result = await update();
    if (result !== true || attempt >= 20) return result;
    await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 5000)));
  }
}

async function main() {
  shell();
  const sandbox = await firstUpdate();
  if (!sandbox || sandbox === true) return;
  $('error').textContent = '';
  if (sandbox.status === 'paused') {
    // Paused: frozen with everything kept; resuming brings the desktop back where it was.
    const resume = el('button', { type: 'button', id: 'resume' }, 'Resume');
    resume.addEventListener('click', async () => {
      resume.disabled = true;
      try {
        await api(`${path}/resume`, { method: 'POST' });
        location.reload();
      } catch (error) {
        resume.disabled = false;
        $('error').textContent = `Could not resume: ${error.message}`;
      }
    });
    $('desktop-section').replaceChildren(el('p', { class: 'notice' },
      'The sandbox is paused: its processes are frozen and kept. ', resume));
    return;
  }
  if (sandbox.status !== 'ready' && sandbox.status !== 'degraded') {
    $('desktop-section').replaceChildren(el('p', { class: 'notice warn' }, `The sandbox is ${sandbox.status}: no live desktop.`));
    return;
  }
  const root = desktopMarkup();
  $('desktop-section').replaceChildren(root);
  desktop = new Desktop(root, `${path}/vnc/websockify`, {
    why: async () => {
      try {
        const now = await api(path, { quiet401: true });
        if (now.status === 'paused') return 'The sandbox was paused: reload the page to resume it.';
        return now.status === 'ready' || now.status === 'degraded' ? null : `The sandbox is ${now.status}: the desktop is gone.`;
      } catch (error) {
        if (error.status === 404) return 'The sandbox has ended and was removed: the desktop is gone.';
        if (error.status === 401) return 'Signed out: sign in again to watch.';
        return null;
      }
    },
  });
  await update();
  desktop.start();
  setInterval(update, 10000);
}

main();
