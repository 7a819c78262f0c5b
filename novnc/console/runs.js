// The runs list, newest first.
import { api, shell, el, pill, ago } from '/assets/console/api.js';
import '/assets/console/nav.js';

async function load() {
  const body = document.getElementById('runs');
  try {
    const { runs } = await api('/v1/runs');
    body.replaceChildren();
    if (runs.length === 0) {
      body.append(el('tr', {}, el('td', { colspan: '4', class: 'empty' }, 'No runs yet. ',
        el('a', { href: '/runs/new' }, 'Start one'), '.')));
      return;
    }
    for (const run of runs) {
      body.append(el('tr', {},
        el('td', { 'data-label': 'Task' }, el('a', { href: `/runs/${encodeURIComponent(run.id)}` }, run.task.length > 90 ? `${run.task.slice(0, 90)}…` : run.task),
          el('div', { class: 'meta mono' }, run.id)),
        el('td', { 'data-label': 'Status' }, pill(run.status)),
        el('td', { 'data-label': 'Model', class: 'mono' }, run.model),
        el('td', { 'data-label': 'Started' }, ago(run.created_at))));
    }
  } catch (error) {
    document.getElementById('error').textContent = `Could not list the runs: ${error.message}`;
  }
}

shell();
load();
// The list stays current on a page left open.
setInterval(load, 10000);
