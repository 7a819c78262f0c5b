// The program behind a stateful Node session (sandboxd/src/nodejs/session.rs). It reads one JSON
// request per line on stdin ({id, code, timeout_ms, cwd}), runs the code in this process's global
// context (so globals, functions and `require`d modules persist between requests), and answers
// with one line on stdout that starts with the marker sandboxd passed in AGENTBOX_NODE_MARKER.
// Whatever the code writes to process.stdout / process.stderr during a request is captured into
// the answer (bounded); writes that bypass them (a child process inheriting fd 1) reach sandboxd
// as plain lines and are attributed to the request in flight.
// Everything is inside one function: a top-level declaration here would share the global
// lexical scope with the code it runs (and collide with the code's own names).
(() => {
'use strict';
const vm = require('node:vm');
const util = require('node:util');
const readline = require('node:readline');
const Module = require('node:module');

const MARKER = process.env.AGENTBOX_NODE_MARKER || '';
const LIMIT = Number(process.env.AGENTBOX_NODE_OUTPUT_LIMIT || 1048576);
delete process.env.AGENTBOX_NODE_MARKER;
delete process.env.AGENTBOX_NODE_OUTPUT_LIMIT;

const rawOut = process.stdout.write.bind(process.stdout);
let capture = null;

function capturing(name, raw) {
  return function (chunk, encoding, callback) {
    if (capture === null) return raw(chunk, encoding, callback);
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    const room = LIMIT - capture.bytes;
    if (room > 0) {
      const kept = text.length > room ? text.slice(0, room) : text;
      capture.bytes += kept.length;
      const last = capture.outputs[capture.outputs.length - 1];
      if (last && last.name === name) last.text += kept;
      else capture.outputs.push({ output_type: 'stream', name, text: kept });
    }
    if (text.length > room) capture.truncated = true;
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (cb) process.nextTick(cb);
    return true;
  };
}
process.stdout.write = capturing('stdout', rawOut);
process.stderr.write = capturing('stderr', process.stderr.write.bind(process.stderr));

function refreshRequire() {
  globalThis.require = Module.createRequire(process.cwd() + '/');
}
refreshRequire();
globalThis.module = { exports: {} };
globalThis.exports = globalThis.module.exports;

process.on('uncaughtException', (e) => {
  if (capture) capture.outputs.push(errorOutput(e));
});
process.on('unhandledRejection', (e) => {
  if (capture) capture.outputs.push(errorOutput(e));
});

function errorOutput(e) {
  const name = (e && e.name) || 'Error';
  const message = e && e.message !== undefined ? String(e.message) : String(e);
  const stack = e && e.stack ? String(e.stack) : `${name}: ${message}`;
  return { output_type: 'error', ename: name, evalue: message, traceback: stack.split('\n') };
}

let count = 0;

function withTimeout(promise, ms) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const e = new Error(`the code's promise did not settle within ${ms} ms`);
      e.code = 'ERR_SCRIPT_EXECUTION_TIMEOUT';
      reject(e);
    }, ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

async function run(request) {
  count += 1;
  capture = { outputs: [], bytes: 0, truncated: false };
  let status = 'ok';
  const filename = `cell${count}.js`;
  try {
    if (request.cwd) {
      process.chdir(request.cwd);
      refreshRequire();
    }
    let value;
    let script;
    try {
      script = new vm.Script(request.code, { filename });
    } catch (e) {
      // Top-level await: run the cell as the body of an async function. Its declarations stay
      // local to the cell then; assign to globalThis to keep a value.
      if (e instanceof SyntaxError && /\bawait\b/.test(request.code)) {
        script = new vm.Script(`(async () => {\n${request.code}\n})()`, { filename });
      } else {
        throw e;
      }
    }
    value = script.runInThisContext({ timeout: request.timeout_ms, breakOnSigint: true });
    if (value && typeof value.then === 'function') {
      value = await withTimeout(value, request.timeout_ms);
    }
    if (value !== undefined) {
      capture.outputs.push({
        output_type: 'execute_result',
        execution_count: count,
        data: { 'text/plain': util.inspect(value) },
        metadata: {},
      });
    }
  } catch (e) {
    status = e && e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT' ? 'timeout' : 'error';
    capture.outputs.push(errorOutput(e));
  }
  // Output written by callbacks of this cell that ran before it settled is in; later output
  // goes to the next request or, between requests, straight to the log.
  await new Promise((resolve) => setImmediate(resolve));
  const answer = { id: request.id, status, execution_count: count, ...capture };
  capture = null;
  rawOut(MARKER + JSON.stringify(answer) + '\n');
}

let queue = Promise.resolve();
readline.createInterface({ input: process.stdin, terminal: false }).on('line', (line) => {
  let request;
  try {
    request = JSON.parse(line);
  } catch (e) {
    return;
  }
  queue = queue.then(() => run(request));
});
rawOut(MARKER + JSON.stringify({ ready: true, version: process.version }) + '\n');
})();
