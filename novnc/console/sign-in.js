// The sign-in page: trades the pasted key for the console's session cookie, then goes on.
import { safeNext } from '/assets/console/api.js';

const form = document.getElementById('sign-in');
const message = document.getElementById('message');
const keyInput = document.getElementById('key');

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  message.textContent = '';
  const button = form.querySelector('button');
  button.disabled = true;
  try {
    const response = await fetch('/console/session', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: keyInput.value }),
    });
    if (response.ok) {
      keyInput.value = '';
      location.assign(safeNext(new URLSearchParams(location.search).get('next')));
      return;
    }
    const body = await response.json().catch(() => ({}));
    const text = body?.error?.message || `the server answered ${response.status}`;
    message.textContent = response.status === 401
      ? `Sign-in refused: ${text}. Check the key and try again.`
      : `Sign-in failed: ${text}.`;
    keyInput.setAttribute('aria-invalid', 'true');
    keyInput.focus();
  } catch {
    message.textContent = 'The orchestrator cannot be reached. Check the address and try again.';
  } finally {
    button.disabled = false;
  }
});
