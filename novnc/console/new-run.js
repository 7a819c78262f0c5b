// The new-run form: task, model (configured providers and the server's script: demos),
// sandbox, limits. A refusal names the field; nothing is half-created (the API checks first).
import { api, shell, el } from '/assets/console/api.js';
import '/assets/console/nav.js';

const $ = (id) => document.getElementById(id);

async function main() {
  shell();
  const select = $('model');
  try {
    const { providers, scripts } = await api('/console/models');
    const demos = el('optgroup', { label: 'Scripted demos (no model key needed)' });
    for (const script of scripts) demos.append(el('option', { value: script }, script));
    if (scripts.length) select.append(demos);
    const models = el('optgroup', { label: 'Models' });
    for (const provider of providers) {
      models.append(el('option', { value: provider.configured ? `custom:${provider.prefix}` : '', disabled: !provider.configured },
        provider.configured ? `${provider.prefix} (type the model name)` : `${provider.prefix} (needs ${provider.needs} on the server)`));
    }
    select.append(models);
  } catch (error) {
    $('error').textContent = `Could not list the models: ${error.message}`;
  }
  select.addEventListener('change', () => {
    const custom = select.value.startsWith('custom:');
    $('custom-field').hidden = !custom;
    if (custom) $('custom-model').value = select.value.slice('custom:'.length);
  });
  try {
    const { sandboxes } = await api('/v1/sandboxes?status=ready');
    for (const sandbox of sandboxes) $('sandbox').append(el('option', { value: sandbox.id }, sandbox.id));
    const wanted = new URLSearchParams(location.search).get('sandbox');
    if (wanted) $('sandbox').value = wanted;
  } catch { /* the list is optional */ }

  $('new-run').addEventListener('submit', async (event) => {
    event.preventDefault();
    $('error').textContent = '';
    for (const field of document.querySelectorAll('[aria-invalid]')) field.removeAttribute('aria-invalid');
    const model = select.value.startsWith('custom:') ? $('custom-model').value.trim() : select.value;
    const body = { task: $('task').value, model };
    if ($('sandbox').value) body.sandbox_id = $('sandbox').value;
    const limits = {};
    for (const [id, name] of [['max-steps', 'max_steps'], ['max-seconds', 'max_seconds'], ['max-images', 'max_images']]) {
      if ($(id).value !== '') limits[name] = Number($(id).value);
    }
    if (Object.keys(limits).length) body.limits = limits;
    const button = event.target.querySelector('button[type=submit]');
    button.disabled = true;
    button.textContent = 'Starting…';
    try {
      const run = await api('/v1/runs', { method: 'POST', body });
      location.assign(`/runs/${encodeURIComponent(run.id)}`);
    } catch (error) {
      $('error').textContent = `The run was not started: ${error.message}`;
      const fields = { task: 'task', model: select.value.startsWith('custom:') ? 'custom-model' : 'model', sandbox_id: 'sandbox',
        max_steps: 'max-steps', max_seconds: 'max-seconds', max_images: 'max-images' };
      const field = Object.entries(fields).find(([name]) => error.message.includes(`\`${name}\``) || error.message.includes(`limits.${name}`));
      if (field) { $(field[1]).setAttribute('aria-invalid', 'true'); $(field[1]).focus(); }
      button.disabled = false;
      button.textContent = 'Start run';
    }
  });
  // Enabled only now: a click before the handler above existed submitted the form natively,
  // which reloaded the page and lost what was typed (a console test caught it).
  $('new-run').querySelector('button[type=submit]').disabled = false;
}

main();
