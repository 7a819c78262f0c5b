// The sandboxes list: status, age, expiry, metadata; create, delete, open the desktop.
import { api, shell, el, pill, ago, until } from '/assets/console/api.js';
import '/assets/console/nav.js';

const $ = (id) => document.getElementById(id);

async function load() {
  const body = $('sandboxes');
  try {
    const { sandboxes } = await api('/v1/sandboxes');
    body.replaceChildren();
    if (sandboxes.length === 0) {
      body.append(el('tr', {}, el('td', { colspan: '6', class: 'empty' }, 'No sandboxes. Create one, or start a run: it takes one itself.')));
      return;
    }
    for (const sandbox of sandboxes) {
      const id = encodeURIComponent(sandbox.id);
      const live = sandbox.status === 'ready' || sandbox.status === 'degraded';
      const remove = el('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${sandbox.id}` }, 'Delete');
      remove.addEventListener('click', async () => {
        if (!confirm(`Delete sandbox ${sandbox.id}? Its container and desktop end now.`)) return;
        remove.disabled = true;
        try {
          await api(`/v1/sandboxes/${id}`, { method: 'DELETE' });
          $('notice').textContent = `Deleted ${sandbox.id}.`;
        } catch (error) {
          $('error').textContent = `Could not delete ${sandbox.id}: ${error.message}`;
        }
        load();
      });
      const metadata = Object.entries(sandbox.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', ');
      body.append(el('tr', { 'data-id': sandbox.id },
        el('td', { 'data-label': 'Sandbox' }, live
          ? el('a', { href: `/sandboxes/${id}`, class: 'mono' }, sandbox.id)
          : el('span', { class: 'mono' }, sandbox.id)),
        el('td', { 'data-label': 'Status' }, pill(sandbox.status), sandbox.error ? el('div', { class: 'meta' }, sandbox.error) : null),
        el('td', { 'data-label': 'Age' }, ago(sandbox.created_at)),
        el('td', { 'data-label': 'Expires' }, until(sandbox.expires_at)),
        el('td', { 'data-label': 'Metadata', class: 'mono' }, metadata || '–'),
        el('td', {}, el('div', { class: 'row' },
          live ? el('a', { class: 'button', href: `/sandboxes/${id}` }, 'Open desktop') : null,
          live ? el('a', { class: 'button', href: `/runs/new?sandbox=${id}` }, 'Run a task') : null,
          remove))));
    }
  } catch (error) {
    $('error').textContent = `Could not list the sandboxes: ${error.message}`;
  }
}

$('create').addEventListener('click', async () => {
  const button = $('create');
  button.disabled = true;
  $('error').textContent = '';
  $('notice').textContent = 'Creating a sandbox: this takes a few seconds (longer without a warm pool)…';
  try {
    const sandbox = await api('/v1/sandboxes', { method: 'POST', body: { metadata: { from: 'console' } } });
    $('notice').textContent = `Sandbox ${sandbox.id} is ready.`;
  } catch (error) {
    $('notice').textContent = '';
    $('error').textContent = `The sandbox was not created: ${error.message}`;
  }
  button.disabled = false;
  load();
});

shell();
load();
// The list stays current on a page left open (statuses, ages, expiries).
setInterval(load, 10000);
