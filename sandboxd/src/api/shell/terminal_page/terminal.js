// The terminal page: xterm.js on sandboxd's terminal WebSocket (/terminal/ws), in the message
// format of /v1/shell/ws: {"type":"input"|"resize"|"pong", "data": ...} up, and "session_id",
// "ready", "output", "ping", "exit", "error" down.
(function () {
  'use strict';
  var status = document.getElementById('status');
  var term = new Terminal({ cursorBlink: true, scrollback: 5000 });
  var fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById('terminal'));
  fit.fit();
  window.agentboxTerminal = term;

  var url = new URL('/terminal/ws', location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  var socket = new WebSocket(url.href);
  function send(type, data) {
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: type, data: data }));
    }
  }
  function resize() {
    fit.fit();
    send('resize', { cols: term.cols, rows: term.rows });
  }
  socket.onopen = function () { status.textContent = 'connected'; resize(); };
  socket.onmessage = function (event) {
    var message;
    try { message = JSON.parse(event.data); } catch (e) { return; }
    switch (message.type) {
      case 'output': term.write(message.data); break;
      case 'ready': status.textContent = 'ready'; document.body.dataset.ready = 'true'; break;
      case 'ping': send('pong', message.data); break;
      case 'exit': status.textContent = 'the shell exited (' + message.data + ')'; break;
      case 'error': status.textContent = 'error: ' + message.data; break;
    }
  };
  socket.onclose = function () { status.textContent = 'disconnected'; };
  term.onData(function (data) { send('input', data); });
  window.addEventListener('resize', resize);
  term.focus();
})();
