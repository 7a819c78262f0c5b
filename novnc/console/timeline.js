// A run's timeline fed by its Server-Sent Events. EventSource reconnects by itself with
// Last-Event-ID after a dropped connection; events at or below the last seq shown are skipped,
// so nothing is lost or shown twice. Every event's seq is recorded on the row that shows it
// (`data-seqs`), which is how the tests check that.
import { el, clock } from '/assets/console/api.js';

const KINDS = ['run.status', 'agent.message', 'agent.reasoning', 'action.started', 'action.finished',
  'control.taken', 'control.returned', 'input.requested', 'input.received', 'artifact.created',
  'artifact.skipped', 'error', 'usage', 'remote.submitted', 'remote.task', 'sandbox.paused',
  'sandbox.resumed', 'sandbox.hibernated', 'sandbox.woken'];

const STATUS_TEXT = {
  queued: 'Queued: waiting for a sandbox',
  running: 'The agent is driving',
  paused: 'Paused: a person has control',
  waiting_for_input: 'The agent asks for input',
  auth_required: 'The remote agent needs you to sign in with it',
  canceling: 'Canceling: waiting for the remote agent to confirm',
  completed: 'Completed',
  failed: 'Failed',
  canceled: 'Canceled',
  unknown: 'Outcome unknown',
};

export const TERMINAL = new Set(['completed', 'failed', 'canceled', 'unknown']);

function describeAction(action) {
  if (!action || typeof action !== 'object') return String(action ?? '');
  const kind = action.kind || action.type || Object.keys(action)[0] || 'action';
  if (Array.isArray(action.actions)) {
    return action.actions.map((a) => {
      const name = a.action_type || a.type || 'action';
      const args = [];
      if (a.x !== undefined && a.y !== undefined) args.push(`${a.x}, ${a.y}`);
      if (a.key) args.push(a.key);
      if (Array.isArray(a.keys)) args.push(a.keys.join('+'));
      if (a.text) args.push(JSON.stringify(a.text.length > 40 ? `${a.text.slice(0, 40)}…` : a.text));
      if (Array.isArray(a.path)) args.push(`${a.path.length} points`);
      return args.length ? `${name} (${args.join(', ')})` : name;
    }).join(' · ');
  }
  if (action.command) {
    const command = action.command.length > 80 ? `${action.command.slice(0, 80)}…` : action.command;
    return `shell: ${command}`;
  }
  return kind;
}

function timings(t) {
  if (!t) return '';
  const parts = [];
  if (t.model_ms) parts.push(`model ${t.model_ms} ms`);
  parts.push(`act ${t.action_ms} ms`);
  if (t.settle_ms) parts.push(`settle ${t.settle_ms} ms`);
  if (t.capture_ms) parts.push(`capture ${t.capture_ms} ms`);
  return parts.join(' · ');
}

export class Timeline {
  // list: the <ol>; streamState: where the connection's state is told;
  // artifactBase: URL prefix of the run's artifacts (screenshots/..., outputs/...);
  // onEvent(event): every new event, after it is shown.
  constructor(list, { streamState, artifactBase, onEvent = () => {}, onEnd = () => {} }) {
    this.list = list;
    this.streamState = streamState;
    this.artifactBase = artifactBase;
    this.onEvent = onEvent;
    this.onEnd = onEnd;
    this.lastSeq = 0;
    this.rows = new Map();
    this.source = null;
    this.ended = false;
    // Long runs stay calm: the newest events show, earlier ones fold behind one button.
    this.keep = 12;
    this.expanded = false;
    this.more = el('button', { type: 'button', class: 'more', hidden: true });
    this.more.addEventListener('click', () => {
      this.expanded = !this.expanded;
      this.refold();
    });
    list.before(this.more);
  }

  refold() {
    const rows = [...this.list.children].filter((row) => !row.dataset.quiet);
    const folded = this.expanded ? 0 : Math.max(0, rows.length - this.keep);
    rows.forEach((row, i) => row.classList.toggle('folded', i < folded));
    const earlier = Math.max(0, rows.length - this.keep);
    this.more.hidden = earlier === 0;
    this.more.textContent = this.expanded ? 'Fold earlier events' : `Show ${earlier} earlier event${earlier === 1 ? '' : 's'}`;
    this.more.setAttribute('aria-expanded', String(this.expanded));
  }

  say(text, kind = '') {
    if (!this.streamState) return;
    this.streamState.textContent = text;
    this.streamState.className = `stream-state pill ${kind}`;
  }

  // Follows `url` (the events route); `afterSeqParam` adds ?after_seq= for a fresh source.
  follow(url) {
    this.url = url;
    this.open();
  }

  open() {
    if (this.ended) return;
    const separator = this.url.includes('?') ? '&' : '?';
    const source = new EventSource(`${this.url}${separator}after_seq=${this.lastSeq}`);
    this.source = source;
    this.say('Connecting…', 'retrying');
    source.addEventListener('open', () => {
      // How many times the stream was (re)opened: more than one after a dropped connection.
      this.list.dataset.connections = String(Number(this.list.dataset.connections || 0) + 1);
      this.say('Live', 'live');
    });
    for (const kind of KINDS) {
      source.addEventListener(kind, (message) => {
        if (!message.data) return; // the connection's own 'error' event
        let event;
        try { event = JSON.parse(message.data); } catch { return; }
        this.add(event);
      });
    }
    source.addEventListener('error', (message) => {
      if (message.data) return;
      if (this.ended) return;
      if (source.readyState === EventSource.CONNECTING) {
        this.say('Connection lost; reconnecting…', 'retrying');
        return;
      }
      // Closed for good by the browser (the server refused): let the page say why.
      source.close();
      this.say('Disconnected', 'ended');
      this.onEnd('refused');
    });
  }

  close() {
    this.ended = true;
    this.source?.close();
  }

  add(event) {
    if (typeof event.seq !== 'number' || event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    this.list.dataset.lastSeq = String(event.seq);
    // Follow the newest event only when the reader is already at the end of the panel, and
    // scroll the panel alone: the page (and the desktop on it) never moves under the reader.
    const panel = this.list.closest('.timeline-panel');
    const following = panel && panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80;
    this.render(event);
    this.refold();
    if (following && panel.scrollHeight > panel.clientHeight) panel.scrollTop = panel.scrollHeight;
    this.onEvent(event);
    if (event.type === 'run.status' && TERMINAL.has(event.status)) {
      this.close();
      this.say('Finished', 'completed');
      this.onEnd('finished');
    }
  }

  row(key, note = false) {
    let row = key ? this.rows.get(key) : null;
    if (!row) {
      row = el('li', { class: note ? 'note' : '' });
      row.dataset.seqs = '';
      if (key) this.rows.set(key, row);
      this.list.append(row);
    }
    return row;
  }

  mark(row, seq) {
    row.dataset.seqs = row.dataset.seqs ? `${row.dataset.seqs} ${seq}` : String(seq);
  }

  // The screenshot taken after a step (`screenshot` is its observation id; the file is
  // screenshots/<id>.png, or .jpg for JPEG observations), or a quiet placeholder.
  thumb(id, label) {
    if (!id) return el('span', { class: 'thumb none', 'aria-hidden': 'true' }, label || '');
    const name = id.replace(/^screenshots\//, '').replace(/\.(png|jpg)$/, '');
    const url = (extension) => `${this.artifactBase}/screenshots/${encodeURIComponent(name)}.${extension}`;
    const img = el('img', { class: 'thumb', src: url('png'), alt: 'Screenshot after this step', loading: 'lazy' });
    const link = el('a', { href: url('png'), target: '_blank', rel: 'noopener' }, img);
    img.addEventListener('error', () => {
      if (img.src.endsWith('.png')) {
        img.src = url('jpg');
        link.href = url('jpg');
      } else {
        link.replaceWith(el('span', { class: 'thumb none', 'aria-hidden': 'true' }));
      }
    });
    return link;
  }

  render(event) {
    const when = el('div', { class: 'when' }, `#${event.seq} · ${clock(event.at)}`);
    switch (event.type) {
      case 'action.started':
      case 'action.finished': {
        const row = this.row(`call:${event.call_id}`);
        this.mark(row, event.seq);
        row.replaceChildren();
        const finished = event.type === 'action.finished';
        const outcome = finished ? event.outcome : 'running';
        const body = el('div', {},
          el('div', { class: 'what' }, `Step ${event.step} · ${describeAction(event.action)}`),
          el('div', { class: `when outcome-${outcome}` },
            finished ? `${outcome}${event.timings ? ` · ${timings(event.timings)}` : ''}` : 'in progress…'),
          event.error ? el('p', { class: 'text outcome-error' }, event.error) : null,
          when,
          el('details', {}, el('summary', {}, 'Details'), el('pre', {}, JSON.stringify(event.action, null, 2))));
        const shell = event.action && event.action.command !== undefined;
        row.append(finished && event.screenshot ? this.thumb(event.screenshot) : this.thumb(null, shell ? 'shell' : ''), body);
        break;
      }
      case 'usage': {
        const row = this.row(`usage:${event.seq}`, true);
        this.mark(row, event.seq);
        row.hidden = true; // token counts: kept for the record, not shown
        row.dataset.quiet = 'yes';
        break;
      }
      case 'run.status': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, STATUS_TEXT[event.status] || event.status),
          event.reason ? el('p', { class: 'text' }, event.reason) : null,
          event.answer ? el('p', { class: 'text' }, event.answer) : null, when));
        break;
      }
      case 'agent.message': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('p', { class: 'text' }, event.text), when));
        break;
      }
      case 'agent.reasoning': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('details', {}, el('summary', {}, `Reasoning (step ${event.step})`),
          el('pre', {}, event.text)), when);
        break;
      }
      case 'control.taken':
      case 'control.returned': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, event.type === 'control.taken'
          ? 'A person took control' : 'Control handed back to the agent'),
        event.note ? el('p', { class: 'text' }, `Note: ${event.note}`) : null, when));
        break;
      }
      case 'input.requested': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, 'The agent asks'), el('p', { class: 'text' }, event.question), when));
        break;
      }
      case 'input.received': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, 'Answered'), el('p', { class: 'text' }, event.text), when));
        break;
      }
      case 'artifact.created': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, 'File saved: '), el('span', { class: 'mono' }, event.name), when));
        break;
      }
      case 'artifact.skipped': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, 'File not kept: '), el('span', { class: 'mono' }, event.name),
          el('p', { class: 'text' }, event.reason), when));
        break;
      }
      case 'error': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', { class: 'outcome-error' }, el('strong', {}, event.fatal ? 'Error (the run stops)' : 'Error'),
          el('p', { class: 'text' }, `${event.kind}: ${event.message}`), when));
        break;
      }
      case 'remote.submitted': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('strong', {}, 'Sent to the remote agent '),
          el('span', { class: 'mono' }, event.agent), when));
        break;
      }
      case 'remote.task': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        const what = event.task_id ? `Remote task ${event.task_id}: ` : 'The remote agent answered: ';
        row.append(el('div', {}, el('strong', {}, what), el('span', { class: 'mono' }, event.state),
          event.message ? el('p', { class: 'text' }, event.message) : null, when));
        break;
      }
      case 'sandbox.paused':
      case 'sandbox.resumed':
      case 'sandbox.hibernated':
      case 'sandbox.woken': {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        const what = {
          'sandbox.paused': 'Sandbox paused: ',
          'sandbox.resumed': 'Sandbox resumed: ',
          'sandbox.hibernated': 'Sandbox hibernated: ',
          'sandbox.woken': 'Sandbox woken: ',
        }[event.type];
        row.append(el('div', {}, el('strong', {}, what), el('span', {}, event.reason), when));
        break;
      }
      default: {
        const row = this.row(null, true);
        this.mark(row, event.seq);
        row.append(el('div', {}, el('span', { class: 'mono' }, event.type), when));
      }
    }
  }
}

// Artifacts as a list: image previews (raster images only), download links for everything.
export function renderArtifacts(list, artifacts, base) {
  list.replaceChildren();
  const outputs = artifacts.filter((a) => a.kind !== 'screenshot');
  if (outputs.length === 0) {
    list.append(el('li', { class: 'empty' }, 'No files yet. Files the agent saves under ~/outputs appear here.'));
    return;
  }
  for (const artifact of outputs) {
    const href = `${base}/${artifact.name.split('/').map(encodeURIComponent).join('/')}`;
    const file = artifact.name.split('/').pop();
    const previewable = /^image\/(png|jpeg|gif|webp)$/.test(artifact.content_type);
    list.append(el('li', {},
      previewable ? el('img', { src: href, alt: `Preview of ${file}` }) : null,
      el('div', { class: 'mono' }, file),
      el('div', { class: 'when' }, `${artifact.content_type} · ${artifact.size} bytes`),
      el('a', { href, download: file }, `Download ${file}`)));
  }
}
