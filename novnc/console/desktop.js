// The live desktop: noVNC's RFB (the copy embedded in the orchestrator, /assets/vendor/novnc)
// over one of the orchestrator's RFB WebSockets, with honest states: connecting, live,
// connection lost and retrying, ended (and why). Whether the person's input is sent is the
// page's choice (`setControl`); the server enforces it anyway (view tokens and the control gate).
import RFB from '/assets/vendor/novnc/core/rfb.js';

export class Desktop {
  // root: the .desktop element (it holds .screen, .overlay and .gone);
  // socketPath: the WebSocket's path; why: async () => a reason when the session may have
  // ended for good (null to retry).
  constructor(root, socketPath, { why = async () => null, onState = () => {} } = {}) {
    this.root = root;
    this.screen = root.querySelector('.screen');
    this.gone = root.querySelector('.gone');
    this.stateBadge = root.querySelector('[data-role=state]');
    this.modeBadge = root.querySelector('[data-role=mode]');
    this.socketPath = socketPath;
    this.why = why;
    this.onState = onState;
    this.control = false;
    this.rfb = null;
    this.retryDelay = 1000;
    this.stopped = false;
    this.frames = 0;
  }

  start() {
    this.connect();
  }

  stop(reason) {
    this.stopped = true;
    if (this.rfb) {
      const rfb = this.rfb;
      this.rfb = null;
      rfb.disconnect();
    }
    this.setState('ended', reason);
  }

  // Whether the person's mouse and keyboard go to the desktop.
  setControl(control, label) {
    this.control = control;
    if (this.rfb) this.rfb.viewOnly = !control;
    this.root.dataset.control = control ? 'yes' : 'no';
    if (this.modeBadge) {
      this.modeBadge.textContent = label || (control ? 'You have control' : 'View only');
      this.modeBadge.className = `pill ${control ? 'control' : 'view'}`;
    }
  }

  setState(state, detail = '') {
    this.root.dataset.state = state;
    const labels = {
      connecting: 'Connecting…',
      live: 'Live',
      retrying: `Connection lost; retrying${detail ? ` (${detail})` : ''}`,
      ended: 'Ended',
    };
    if (this.stateBadge) this.stateBadge.textContent = labels[state] || state;
    this.gone.textContent = state === 'ended' ? detail : '';
    this.onState(state, detail);
  }

  async connect() {
    if (this.stopped) return;
    this.setState('connecting');
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    let rfb;
    try {
      rfb = new RFB(this.screen, `${scheme}//${location.host}${this.socketPath}`, { shared: true });
    } catch (error) {
      this.retry(String(error));
      return;
    }
    this.rfb = rfb;
    rfb.viewOnly = !this.control;
    rfb.scaleViewport = true;
    rfb.focusOnClick = true;
    rfb.background = '#15181c';
    rfb.addEventListener('connect', () => {
      this.retryDelay = 1000;
      // How many times the desktop connected: more than one after a lost connection.
      this.root.dataset.connects = String(Number(this.root.dataset.connects || 0) + 1);
      const canvas = this.screen.querySelector('canvas');
      if (canvas) canvas.setAttribute('aria-label', 'Remote desktop');
      this.setState('live');
    });
    rfb.addEventListener('disconnect', async () => {
      if (this.rfb !== rfb) return;
      this.rfb = null;
      if (this.stopped) return;
      const reason = await this.why().catch(() => null);
      if (reason) {
        this.stop(reason);
      } else {
        this.retry();
      }
    });
  }

  retry(detail) {
    const seconds = Math.round(this.retryDelay / 1000);
    this.setState('retrying', detail || `next try in ${seconds} s`);
    setTimeout(() => this.connect(), this.retryDelay);
    this.retryDelay = Math.min(this.retryDelay * 2, 15000);
  }
}

// The markup a Desktop lives in: a bar with its state and mode above the screen (never over it).
export function desktopMarkup() {
  const root = document.createElement('div');
  root.className = 'desktop';
  const bar = document.createElement('div');
  bar.className = 'desktop-bar';
  const state = document.createElement('span');
  state.className = 'pill';
  state.dataset.role = 'state';
  state.setAttribute('role', 'status');
  const mode = document.createElement('span');
  mode.className = 'pill';
  mode.dataset.role = 'mode';
  mode.setAttribute('role', 'status');
  bar.append(state, mode);
  const frame = document.createElement('div');
  frame.className = 'frame';
  const screen = document.createElement('div');
  screen.className = 'screen';
  const gone = document.createElement('div');
  gone.className = 'gone';
  frame.append(screen, gone);
  root.append(bar, frame);
  return root;
}
