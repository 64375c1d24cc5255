// Sluice's web console: a client of the REST API and /metrics, nothing else.
//
// Every name, config value, offset and trace reaches the page as text: elements are built
// with createElement and filled with text nodes or textContent, never parsed from strings,
// and the server's Content-Security-Policy forbids inline scripts besides.
'use strict';

const REFRESH_MS = 2000;
const HISTORY_MS = 5 * 60 * 1000;
const MAX_OFFSET_ROWS = 500;
const TOKEN_KEY = 'sluice.token';
// Host keys the create form shows unfolded.
const COMMON_HOST_KEYS = ['tasks.max', 'destination', 'sandbox.fs.read', 'sandbox.fs.write'];

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  view: null,
  generation: 0,
  signingIn: false,
  flash: null,
  // Records written per connector (summed over tasks) at the last /metrics read, and the
  // rates since, for the overview's numbers and charts.
  lastTotals: null,
  history: new Map(),
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// ---- DOM helpers ---------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function badge(state) {
  const known = ['RUNNING', 'PAUSED', 'STOPPED', 'FAILED', 'FINISHED', 'UNASSIGNED', 'RESTARTING'];
  return el('span', { class: 'badge ' + (known.includes(state) ? state : ''), text: state || '?' });
}

function message(node, kind, text) {
  node.className = 'message ' + kind;
  node.textContent = text || '';
}

function bytes(n) {
  if (typeof n !== 'number') return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}

function rateText(rate) {
  if (rate === undefined) return '–';
  if (rate >= 100) return Math.round(rate).toLocaleString('en-US');
  return rate.toFixed(1);
}

function json(value) {
  return JSON.stringify(value);
}

// ---- Offsets, exactly as stored ------------------------------------------------------

// A plugin's partitions and offsets are any JSON, and their integers may pass 2^53
// (file-pulse's file times are nanoseconds): JSON.parse would round them, so an offset
// saved unchanged would not be the one stored, and a partition saved to would not be the
// one read. They are parsed keeping each number's text, and written back from it.
class ExactNumber {
  constructor(text) {
    this.text = text;
  }
}

function numberOf(value) {
  return value instanceof ExactNumber ? Number(value.text) : value;
}

function parseExact(text) {
  const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
  const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
  let i = 0;
  const fail = (what) => {
    throw new SyntaxError(what + ' at position ' + i);
  };
  const space = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  const match = (pattern) => {
    pattern.lastIndex = i;
    const found = pattern.exec(text);
    if (!found) return null;
    i = pattern.lastIndex;
    return found[0];
  };
  const string = () => {
    const token = match(STRING);
    if (token === null) fail('a bad string');
    return JSON.parse(token);
  };
  const value = () => {
    space();
    const c = text[i];
    if (c === '{') {
      i++;
      const object = {};
      space();
      if (text[i] === '}') return i++, object;
      for (;;) {
        space();
        if (text[i] !== '"') fail('expected a key');
        const key = string();
        space();
        if (text[i++] !== ':') fail("expected ':'");
        // defineProperty: a key named __proto__ is a key like any other.
        Object.defineProperty(object, key, { value: value(), enumerable: true, writable: true, configurable: true });
        space();
        if (text[i] === ',') i++;
        else if (text[i] === '}') return i++, object;
        else fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      i++;
      const array = [];
      space();
      if (text[i] === ']') return i++, array;
      for (;;) {
        array.push(value());
        space();
        if (text[i] === ',') i++;
        else if (text[i] === ']') return i++, array;
        else fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    for (const [word, literal] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) return (i += word.length), literal;
    }
    const number = match(NUMBER);
    if (number === null) fail('unexpected ' + (c === undefined ? 'end' : JSON.stringify(c)));
    return new ExactNumber(number);
  };
  const result = value();
  space();
  if (i !== text.length) fail('unexpected text after the value');
  return result;
}

// JSON.stringify, each ExactNumber written as its text.
const EXACT_MARK = '\u0000exact' + Math.random().toString(36).slice(2) + ':';
function exactJson(value, indent) {
  const marked = JSON.stringify(value, (_, v) => (v instanceof ExactNumber ? EXACT_MARK + v.text : v), indent);
  const quotedMark = JSON.stringify(EXACT_MARK).slice(0, -1);
  return marked.split(quotedMark).map((part, n) => (n === 0 ? part : part.replace('"', ''))).join('');
}

// ---- The API -------------------------------------------------------------------------

function connectorPath(name, rest) {
  return '/connectors/' + encodeURIComponent(name) + (rest || '');
}

// `exact`: numbers kept as their text (ExactNumber), for partitions and offsets.
async function api(method, path, body, exact) {
  const headers = { Accept: 'application/json' };
  if (app.token) headers.Authorization = 'Bearer ' + app.token;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    // A string is JSON already (written by exactJson).
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = text;
  if ((response.headers.get('Content-Type') || '').startsWith('application/json') && text) {
    data = exact && response.ok ? parseExact(text) : JSON.parse(text);
  }
  if (!response.ok) {
    const reason = data && data.message ? data.message : 'HTTP ' + response.status;
    if (response.status === 401) showSignIn(reason);
    throw new ApiError(response.status, reason);
  }
  return data;
}

// Prometheus' text format: the label set of one sample, `name="value",...`, with \\ \" \n.
function parseLabels(text) {
  const labels = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) break;
    const name = text.slice(i, eq).replace(/^,/, '').trim();
    let j = eq + 2;
    let value = '';
    while (j < text.length && text[j] !== '"') {
      if (text[j] === '\\') {
        j++;
        value += text[j] === 'n' ? '\n' : text[j];
      } else {
        value += text[j];
      }
      j++;
    }
    labels[name] = value;
    i = j + 1;
  }
  return labels;
}

// Records written per connector, keyed both `tenant/connector` (as the operator names
// connectors) and `connector` (as a tenant does; a tenant's /metrics holds its own only).
function writtenTotals(text) {
  const totals = new Map();
  const metric = 'sluice_source_record_write_total{';
  for (const line of text.split('\n')) {
    if (!line.startsWith(metric)) continue;
    const close = line.lastIndexOf('} ');
    if (close < 0) continue;
    const labels = parseLabels(line.slice(metric.length, close));
    const value = Number(line.slice(close + 2));
    for (const key of [labels.tenant + '/' + labels.connector, labels.connector]) {
      totals.set(key, (totals.get(key) || 0) + value);
    }
  }
  return totals;
}

async function sampleRates() {
  let text;
  try {
    text = await api('GET', '/metrics');
  } catch (e) {
    if (e.status === 401) throw e;
    return;
  }
  const now = Date.now();
  const totals = writtenTotals(typeof text === 'string' ? text : '');
  const last = app.lastTotals;
  if (last) {
    const seconds = (now - last.at) / 1000;
    for (const [key, total] of totals) {
      const before = last.totals.get(key);
      if (before === undefined || seconds <= 0) continue;
      const points = app.history.get(key) || [];
      points.push({ at: now, rate: Math.max(0, total - before) / seconds });
      while (points.length && points[0].at < now - HISTORY_MS) points.shift();
      app.history.set(key, points);
    }
    for (const key of app.history.keys()) if (!totals.has(key)) app.history.delete(key);
  }
  app.lastTotals = { at: now, totals };
}

function currentRate(name) {
  const points = app.history.get(name);
  return points && points.length ? points[points.length - 1].rate : undefined;
}

function drawSparkline(canvas, name) {
  const points = app.history.get(name) || [];
  canvas.dataset.points = String(points.length);
  const ctx = canvas.getContext('2d');
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  ctx.strokeStyle = '#e4e7ec';
  ctx.beginPath();
  ctx.moveTo(0, height - 0.5);
  ctx.lineTo(width, height - 0.5);
  ctx.stroke();
  if (points.length < 2) return;
  const now = Date.now();
  // The chart spans what it has seen (10 s at least, five minutes at most).
  const span = Math.min(HISTORY_MS, Math.max(10_000, now - points[0].at));
  const max = Math.max(1, ...points.map((p) => p.rate));
  ctx.strokeStyle = '#1d4ed8';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  points.forEach((p, i) => {
    const x = width - ((now - p.at) / span) * width;
    const y = height - 1 - (p.rate / max) * (height - 3);
    if (i === 0) ctx.moveTo(x, y);
    else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

// ---- Sign-in -------------------------------------------------------------------------

function showWho() {
  document.getElementById('who').textContent = app.token ? 'Signed in with a token' : '';
  document.getElementById('sign-out').hidden = !app.token;
}

// Shown when the API answers 401: no token yet, or one it refused (then with its reason).
function showSignIn(reason) {
  // A view's requests go out together, so a refused token gets more than one 401: the
  // first shows the form with the reason, the others must not draw it again without it.
  if (app.signingIn && app.token === null) return;
  const refused = app.token !== null;
  app.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  app.signingIn = true;
  app.generation++;
  app.view = null;
  showWho();
  const main = clear(document.getElementById('main'));
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'tenant or operator token' });
  const note = el('div', { class: 'message', id: 'signin-message' });
  if (refused && reason) message(note, 'error', 'The token was refused: ' + reason);
  const submit = async () => {
    const token = input.value.trim();
    if (!token) return message(note, 'error', 'Enter a token.');
    app.token = token;
    try {
      await api('GET', '/connectors');
    } catch (e) {
      if (e.status !== 401) message(note, 'error', e.message);
      return; // a 401 has shown this form again, with the reason
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    app.signingIn = false;
    app.lastTotals = null;
    app.history.clear();
    showWho();
    route();
  };
  input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') submit();
  });
  main.append(
    el(
      'div',
      { class: 'signin' },
      el('h1', { text: 'Sign in' }),
      el('p', { class: 'muted', text: 'This worker has tenants. Sign in with your tenant token, or with the operator token to see every tenant. The token is kept for this browser tab only.' }),
      el('label', { for: 'token', text: 'Token' }),
      input,
      el('button', { type: 'button', class: 'primary', id: 'sign-in', onclick: submit, text: 'Sign in' }),
      note,
    ),
  );
  input.focus();
}

// ---- Overview ------------------------------------------------------------------------

function failureTrace(status) {
  if (!status) return null;
  if (status.connector && status.connector.state === 'FAILED' && status.connector.trace) {
    return 'Connector: ' + status.connector.trace;
  }
  for (const task of status.tasks || []) {
    if (task.state === 'FAILED') return 'Task ' + task.id + ': ' + (task.trace || '(no trace)');
  }
  return null;
}

function overviewView() {
  const rows = new Map();
  const body = el('tbody');
  const empty = el('p', { class: 'muted', hidden: true }, 'No connectors yet. ', el('a', { href: '#/plugins', text: 'Create one from a plugin.' }));
  const flash = el('div', { class: 'message' });
  if (app.flash) message(flash, 'ok', app.flash);
  app.flash = null;
  // With hundreds of connectors: how many are in each state, and a filter, so the few that
  // fail are found without scrolling.
  const summary = el('p', { id: 'connectors-summary', class: 'muted' });
  const filter = el('input', { type: 'search', id: 'connector-filter', placeholder: 'Filter by name, plugin or state', 'aria-label': 'Filter connectors' });
  const failingOnly = el('input', { type: 'checkbox', id: 'failing-only' });
  const filters = el('div', { class: 'filters' }, filter, el('label', {}, failingOnly, ' only those failing'));
  function shown(cells) {
    const words = filter.value.trim().toLowerCase();
    const text = (cells.name + ' ' + cells.plugin.textContent + ' ' + cells.state.textContent).toLowerCase();
    return (!words || text.includes(words)) && (!failingOnly.checked || cells.tr.classList.contains('failed'));
  }
  function applyFilter() {
    let visible = 0;
    for (const cells of rows.values()) {
      cells.tr.hidden = !shown(cells);
      if (!cells.tr.hidden) visible += 1;
    }
    body.dataset.visible = String(visible);
  }
  filter.addEventListener('input', applyFilter);
  failingOnly.addEventListener('change', applyFilter);
  const table = el(
    'table',
    { id: 'connectors' },
    el(
      'thead',
      {},
      el(
        'tr',
        {},
        el('th', { text: 'Connector' }),
        el('th', { text: 'Plugin' }),
        el('th', { text: 'State' }),
        el('th', { class: 'num', text: 'Tasks running' }),
        el('th', { class: 'num', text: 'Records/s' }),
        el('th', { text: 'Last 5 minutes' }),
        el('th', { text: 'Failure' }),
      ),
    ),
    body,
  );

  function row(name) {
    const cells = {
      plugin: el('td'),
      state: el('td', { class: 'state' }),
      tasks: el('td', { class: 'num tasks' }),
      rate: el('td', { class: 'num rate' }),
      chart: el('canvas', { class: 'spark', width: 160, height: 28 }),
      trace: el('pre', { class: 'trace' }),
    };
    cells.name = name;
    cells.details = el('details', {}, el('summary', { text: 'trace' }), cells.trace);
    cells.tr = el(
      'tr',
      { dataset: { connector: name } },
      el('td', { class: 'name' }, el('a', { href: '#/connector/' + encodeURIComponent(name), text: name })),
      cells.plugin,
      cells.state,
      cells.tasks,
      cells.rate,
      el('td', {}, cells.chart),
      el('td', { class: 'failure' }, cells.details),
    );
    return cells;
  }

  return {
    title: 'Connectors',
    nav: 'nav-connectors',
    mount(main) {
      main.append(el('h1', { text: 'Connectors' }), flash, empty, summary, filters, table);
    },
    async refresh() {
      const [connectors] = await Promise.all([api('GET', '/connectors?expand=status&expand=info'), sampleRates()]);
      const names = Object.keys(connectors).sort();
      empty.hidden = names.length > 0;
      table.hidden = names.length === 0;
      summary.hidden = filters.hidden = names.length === 0;
      const seen = new Set(names);
      for (const [name, cells] of rows) {
        if (!seen.has(name)) {
          cells.tr.remove();
          rows.delete(name);
        }
      }
      names.forEach((name) => {
        const { status, info } = connectors[name];
        let cells = rows.get(name);
        if (!cells) {
          cells = row(name);
          rows.set(name, cells);
        }
        body.append(cells.tr); // in name order
        const state = status ? status.connector.state : '?';
        const tasks = (status && status.tasks) || [];
        cells.plugin.textContent = info && info.config ? info.config['connector.class'] || '' : '';
        // Connect keeps a connector RUNNING when its tasks fail: say so beside it.
        const failedTasks = tasks.filter((t) => t.state === 'FAILED').length;
        const shown = state + ' ' + failedTasks;
        if (cells.state.dataset.shown !== shown) {
          cells.state.dataset.shown = shown;
          cells.state.dataset.state = state;
          clear(cells.state).append(badge(state));
          if (failedTasks) {
            cells.state.append(' ', el('span', { class: 'badge FAILED', text: failedTasks + (failedTasks === 1 ? ' task' : ' tasks') + ' FAILED' }));
          }
        }
        cells.tasks.textContent = tasks.filter((t) => t.state === 'RUNNING').length + '/' + tasks.length;
        cells.rate.textContent = rateText(currentRate(name));
        drawSparkline(cells.chart, name);
        const trace = failureTrace(status);
        cells.tr.classList.toggle('failed', trace !== null);
        cells.details.hidden = trace === null;
        if (trace !== null && cells.trace.textContent !== trace) cells.trace.textContent = trace;
      });
      const byState = new Map();
      let failing = 0;
      for (const name of names) {
        const { status } = connectors[name];
        const state = status ? status.connector.state : '?';
        byState.set(state, (byState.get(state) || 0) + 1);
        if (failureTrace(status) !== null) failing += 1;
      }
      const states = [...byState.entries()].sort().map(([state, n]) => n + ' ' + state).join(', ');
      summary.textContent =
        names.length + (names.length === 1 ? ' connector: ' : ' connectors: ') + states + '; ' + failing + ' failing (a connector or task FAILED)';
      applyFilter();
    },
  };
}

// ---- One connector -------------------------------------------------------------------

function connectorView(name) {
  const heading = el('h1', {}, name, ' ');
  const stateBadge = el('span');
  heading.append(stateBadge);
  const facts = el('dl', { class: 'kv' });
  const note = el('div', { class: 'message', id: 'action-message' });
  const connectorTrace = el('pre', { class: 'trace', hidden: true, id: 'connector-trace' });
  const taskBody = el('tbody');
  const offsetBody = el('tbody');
  const offsetCount = el('span', { class: 'muted' });
  const search = el('input', { type: 'search', id: 'offset-search', placeholder: 'search partitions and offsets' });
  const resetButton = el('button', { type: 'button', class: 'danger', id: 'reset-offsets', text: 'Reset offsets' });
  const offsetHint = el('span', { class: 'muted' });
  const configBody = el('tbody');
  const topicsCell = el('dd', { id: 'topics', class: 'name' });
  const tasksCell = el('dd', { id: 'task-count' });
  let current = null; // the last status
  let offsets = [];
  let editing = false;
  let lastConfig = null;
  let lastOffsets = null;
  let lastTasks = null;
  let notFound = false; // the page says "Not found" in place of the connector

  const act = (label, method, path, after) => async () => {
    message(note, 'ok', label + '…');
    try {
      const answer = await api(method, path);
      message(note, 'ok', label + ': done' + (answer && answer.message ? ' (' + answer.message + ')' : ''));
      if (after) after();
      view.refresh().catch(() => {});
    } catch (e) {
      message(note, 'error', label + ' failed: ' + e.message);
    }
  };
  const deleteButton = el('button', { type: 'button', class: 'danger', dataset: { action: 'delete' }, text: 'Delete' });
  deleteButton.addEventListener('click', async () => {
    if (deleteButton.dataset.confirm !== 'yes') {
      deleteButton.dataset.confirm = 'yes';
      deleteButton.textContent = 'Confirm delete';
      message(note, 'error', 'Click "Confirm delete" to delete ' + name + ' (its offsets are kept).');
      return;
    }
    try {
      await api('DELETE', connectorPath(name));
      app.flash = 'Deleted ' + name + '.';
      location.hash = '#/';
    } catch (e) {
      message(note, 'error', 'Delete failed: ' + e.message);
    }
  });
  const actions = el(
    'div',
    { class: 'actions' },
    el('button', { type: 'button', dataset: { action: 'pause' }, onclick: act('Pause', 'PUT', connectorPath(name, '/pause')), text: 'Pause' }),
    el('button', { type: 'button', dataset: { action: 'resume' }, onclick: act('Resume', 'PUT', connectorPath(name, '/resume')), text: 'Resume' }),
    el('button', { type: 'button', dataset: { action: 'restart' }, onclick: act('Restart', 'POST', connectorPath(name, '/restart?includeTasks=true')), text: 'Restart' }),
    el('button', { type: 'button', dataset: { action: 'stop' }, onclick: act('Stop', 'PUT', connectorPath(name, '/stop')), text: 'Stop' }),
    deleteButton,
  );
  resetButton.addEventListener('click', act('Reset offsets', 'DELETE', connectorPath(name, '/offsets'), () => {
    offsets = [];
    lastOffsets = null;
  }));
  // `change` too: a cleared field (WebDriver's clear, a form reset) fires no `input`. Only
  // a new filter renders, so leaving the field for a row's Edit button keeps that button.
  let shownFilter = '';
  const filterChanged = () => {
    if (search.value.trim().toLowerCase() !== shownFilter) renderOffsets();
  };
  search.addEventListener('input', filterChanged);
  search.addEventListener('change', filterChanged);

  function renderTasks(status) {
    // Drawn again only when a task changed, so an opened trace stays open and a selection
    // in it lasts; a trace open before stays open after.
    const shown = json(status.tasks || []);
    if (shown === lastTasks) return;
    lastTasks = shown;
    const open = new Set([...taskBody.querySelectorAll('tr')].filter((row) => row.querySelector('details[open]')).map((row) => row.dataset.task));
    clear(taskBody);
    for (const task of status.tasks || []) {
      const trace = task.trace ? el('details', { open: open.has(String(task.id)) }, el('summary', { text: 'trace' }), el('pre', { class: 'trace', text: task.trace })) : '';
      taskBody.append(
        el(
          'tr',
          { dataset: { task: task.id } },
          el('td', { class: 'num', text: task.id }),
          el('td', { class: 'state' }, badge(task.state)),
          el('td', { text: task.worker_id }),
          el('td', { class: 'num', text: task.instance ?? '' }),
          el('td', { text: task.version ?? '' }),
          el('td', { class: 'num', text: bytes(task.memory_bytes) }),
          el('td', { class: 'num', text: task.fuel_used === undefined ? '–' : task.fuel_used.toLocaleString('en-US') }),
          el('td', { class: 'num', text: task.records_refused ?? 0 }),
          el('td', {}, trace),
        ),
      );
    }
    if (!(status.tasks || []).length) taskBody.append(el('tr', {}, el('td', { colspan: 9, class: 'muted', text: 'No tasks.' })));
  }

  function progress(offset) {
    if (!offset || !(offset.position instanceof ExactNumber) || !(offset.size instanceof ExactNumber)) return '';
    const size = numberOf(offset.size);
    const done = offset.done === true || size === 0 || numberOf(offset.position) >= size;
    const position = Math.min(numberOf(offset.position), size);
    const percent = size > 0 ? Math.floor((position / size) * 100) : 100;
    return el(
      'div',
      { class: 'progress', dataset: { percent: done ? 100 : percent } },
      offset.path ? el('div', { class: 'path', text: offset.path }) : '',
      el('progress', { max: size || 1, value: size ? position : 1 }),
      ' ',
      el('span', { text: (done ? 100 : percent) + '% of ' + bytes(size) }),
    );
  }

  function editor(entry, cell) {
    editing = true;
    const area = el('textarea', { class: 'offset-editor', text: exactJson(entry.offset, 2) });
    const problem = el('div', { class: 'message' });
    const close = () => {
      editing = false;
      renderOffsets();
    };
    const save = async () => {
      let value;
      try {
        value = parseExact(area.value);
      } catch (e) {
        return message(problem, 'error', 'Not JSON: ' + e.message);
      }
      const body = '{"offsets":[{"partition":' + exactJson(entry.partition) + ',"offset":' + exactJson(value) + '}]}';
      try {
        await api('PATCH', connectorPath(name, '/offsets'), body);
      } catch (e) {
        return message(problem, 'error', e.message);
      }
      message(note, 'ok', 'Offset saved for ' + exactJson(entry.partition) + '.');
      editing = false;
      lastOffsets = null;
      await loadOffsets();
    };
    clear(cell).append(
      area,
      el('div', { class: 'actions' }, el('button', { type: 'button', class: 'primary', onclick: save, text: 'Save offset' }), el('button', { type: 'button', onclick: close, text: 'Cancel' })),
      problem,
    );
  }

  function renderOffsets() {
    if (editing) return;
    const stopped = current && current.connector.state === 'STOPPED';
    resetButton.disabled = !stopped;
    offsetHint.textContent = stopped ? '' : 'Stop the connector to reset or edit its offsets.';
    const needle = search.value.trim().toLowerCase();
    shownFilter = needle;
    const matching = needle ? offsets.filter((o) => (exactJson(o.partition) + ' ' + exactJson(o.offset)).toLowerCase().includes(needle)) : offsets;
    offsetCount.textContent = matching.length + ' of ' + offsets.length + ' partitions' + (matching.length > MAX_OFFSET_ROWS ? ' (first ' + MAX_OFFSET_ROWS + ' shown: refine the search)' : '');
    clear(offsetBody);
    for (const entry of matching.slice(0, MAX_OFFSET_ROWS)) {
      const offsetCell = el('td', {}, el('pre', { class: 'json', text: exactJson(entry.offset) }));
      const edit = el('button', { type: 'button', class: 'edit-offset', disabled: !stopped, text: 'Edit' });
      edit.addEventListener('click', () => editor(entry, offsetCell));
      offsetBody.append(
        el('tr', { class: 'offset' }, el('td', {}, el('pre', { class: 'json partition', text: exactJson(entry.partition) })), el('td', {}, progress(entry.offset)), offsetCell, el('td', {}, edit)),
      );
    }
    if (!matching.length) offsetBody.append(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: offsets.length ? 'No partition matches.' : 'No committed offsets.' })));
  }

  // KIP-558: the topics it has written to (403 when the worker does not track them).
  async function loadTopics() {
    try {
      const answer = await api('GET', connectorPath(name, '/topics'));
      const topics = Object.values(answer || {}).flatMap((entry) => entry.topics || []);
      topicsCell.textContent = topics.length ? topics.join(', ') : 'none written yet';
    } catch (e) {
      topicsCell.textContent = e.status === 403 ? 'not tracked by this worker' : '';
    }
  }

  async function loadOffsets() {
    const answer = await api('GET', connectorPath(name, '/offsets'), undefined, true);
    const loaded = (answer && answer.offsets) || [];
    loaded.sort((a, b) => exactJson(a.partition).localeCompare(exactJson(b.partition)));
    // Drawn again only when something changed (the stopped state enables Edit), so a
    // selection in the table lasts.
    const shown = exactJson([loaded, current && current.connector.state]);
    if (shown === lastOffsets) return;
    lastOffsets = shown;
    offsets = loaded;
    renderOffsets();
  }

  function renderConfig(info) {
    // The task count changes without the config (stopped, finished, resumed).
    tasksCell.textContent = String((info.tasks || []).length);
    const text = json(info.config);
    if (text === lastConfig) return;
    lastConfig = text;
    clear(facts).append(
      el('dt', { text: 'Plugin' }),
      el('dd', { id: 'plugin', text: info.config['connector.class'] || '' }),
      el('dt', { text: 'Tasks' }),
      tasksCell,
      el('dt', { text: 'Topics' }),
      topicsCell,
    );
    clear(configBody);
    for (const key of Object.keys(info.config).sort()) {
      configBody.append(el('tr', {}, el('td', { text: key }), el('td', { class: 'name', text: info.config[key] })));
    }
  }

  const view = {
    title: name,
    nav: 'nav-connectors',
    mount(main) {
      main.append(
        el('p', {}, el('a', { href: '#/', text: '← Connectors' })),
        heading,
        facts,
        actions,
        note,
        connectorTrace,
        el('h2', { text: 'Tasks' }),
        el(
          'table',
          { id: 'tasks' },
          el('thead', {}, el('tr', {}, ...['Task', 'State', 'Worker', 'Instance', 'Version', 'Memory', 'Fuel used', 'Records skipped', 'Trace'].map((h) => el('th', { text: h })))),
          taskBody,
        ),
        el('h2', { text: 'Offsets' }),
        el('div', { class: 'toolbar' }, search, offsetCount, resetButton, offsetHint),
        el('table', { id: 'offsets' }, el('thead', {}, el('tr', {}, el('th', { text: 'Source partition' }), el('th', { text: 'Progress' }), el('th', { text: 'Offset' }), el('th'))), offsetBody),
        el('h2', { text: 'Config' }),
        el('table', { id: 'config' }, el('thead', {}, el('tr', {}, el('th', { text: 'Key' }), el('th', { text: 'Value' }))), configBody),
      );
    },
    async refresh() {
      const generation = app.generation;
      let status, info;
      try {
        [status, info] = await Promise.all([api('GET', connectorPath(name, '/status')), api('GET', connectorPath(name))]);
      } catch (e) {
        // A refresh still under way when this page was left (after "Confirm delete", say)
        // must not replace the page shown now with "Not found".
        if (generation !== app.generation) return;
        if (e.status === 404) {
          // Still looked for: a connector made again under this name is shown once it is.
          if (notFound) return;
          notFound = true;
          const main = clear(document.getElementById('main'));
          main.append(el('h1', { text: 'Not found' }), el('p', { text: e.message }), el('p', {}, el('a', { href: '#/', text: '← Connectors' })));
          return;
        }
        throw e;
      }
      if (notFound) return route();
      current = status;
      clear(stateBadge).append(badge(status.connector.state));
      stateBadge.dataset.state = status.connector.state;
      connectorTrace.hidden = !status.connector.trace;
      connectorTrace.textContent = status.connector.trace || '';
      renderTasks(status);
      renderConfig(info);
      await Promise.all([loadOffsets(), loadTopics()]);
    },
  };
  return view;
}

// ---- Plugins -------------------------------------------------------------------------

function keyTable(keys) {
  return el(
    'table',
    { class: 'keys' },
    el('thead', {}, el('tr', {}, ...['Key', 'Type', 'Required', 'Default', 'Documentation'].map((h) => el('th', { text: h })))),
    el(
      'tbody',
      {},
      keys.map((k) => el('tr', {}, el('td', { class: 'name', text: k.name }), el('td', { text: k.type }), el('td', { text: k.required ? 'yes' : '' }), el('td', { class: 'name', text: k.default_value ?? '' }), el('td', { text: k.documentation || '' }))),
    ),
  );
}

function pluginsView() {
  const pluginBody = el('tbody');
  const rejectedBody = el('tbody');
  let last = null;
  return {
    title: 'Plugins',
    nav: 'nav-plugins',
    mount(main) {
      main.append(
        el('h1', { text: 'Plugins' }),
        el('table', { id: 'plugins' }, el('thead', {}, el('tr', {}, ...['Plugin', 'Version', 'Type', 'Config keys', ''].map((h) => el('th', { text: h })))), pluginBody),
        el('h2', { text: 'Rejected plugin files' }),
        el('table', { id: 'rejected' }, el('thead', {}, el('tr', {}, el('th', { text: 'File' }), el('th', { text: 'Reason' }))), rejectedBody),
      );
    },
    async refresh() {
      const [plugins, rejected] = await Promise.all([api('GET', '/connector-plugins'), api('GET', '/sluice/rejected-plugins')]);
      // The keys are part of what is compared: a plugin file replaced by one of the same
      // version may declare other keys, and the list alone would not show the change.
      const keys = await Promise.all(plugins.map((p) => api('GET', '/connector-plugins/' + encodeURIComponent(p.class) + '/config').catch(() => [])));
      const text = json([plugins, rejected, keys]);
      if (text === last) return;
      last = text;
      clear(pluginBody);
      plugins.forEach((plugin, i) => {
        const own = keys[i].filter((k) => k.group !== 'Common');
        pluginBody.append(
          el(
            'tr',
            { dataset: { plugin: plugin.class } },
            el('td', { class: 'name', text: plugin.class }),
            el('td', { text: plugin.version }),
            el('td', { text: plugin.type }),
            el('td', {}, el('details', {}, el('summary', { text: own.length + ' plugin keys, ' + (keys[i].length - own.length) + ' host keys' }), keyTable(keys[i]))),
            el('td', {}, el('a', { href: '#/new/' + encodeURIComponent(plugin.class), class: 'create', text: 'Create connector' })),
          ),
        );
      });
      if (!plugins.length) pluginBody.append(el('tr', {}, el('td', { colspan: 5, class: 'muted', text: 'No plugins loaded: put a .wasm connector into the plugin folder.' })));
      clear(rejectedBody);
      for (const r of rejected) rejectedBody.append(el('tr', {}, el('td', { class: 'name', text: r.file }), el('td', {}, el('pre', { class: 'trace', text: r.reason }))));
      if (!rejected.length) rejectedBody.append(el('tr', {}, el('td', { colspan: 2, class: 'muted', text: 'No rejected files.' })));
    },
  };
}

// ---- Create a connector --------------------------------------------------------------

function newConnectorView(plugin) {
  const form = el('div', { class: 'form', id: 'create-form' });
  const note = el('div', { class: 'message', id: 'form-message' });
  const fields = new Map(); // key -> { input, error, box }
  let mounted = false;

  function field(def, container) {
    let input;
    if (def.type === 'BOOLEAN') {
      input = el('select', {}, el('option', { value: '', text: def.default_value == null ? '' : '(default: ' + def.default_value + ')' }), el('option', { value: 'true', text: 'true' }), el('option', { value: 'false', text: 'false' }));
    } else {
      input = el('input', { type: def.type === 'PASSWORD' ? 'password' : 'text', placeholder: def.default_value ?? '', autocomplete: 'off' });
    }
    const id = 'field-' + fields.size;
    input.id = id;
    input.dataset.key = def.name;
    const error = el('div', { class: 'field-error' });
    const box = el('div', { class: 'field', dataset: { key: def.name } }, input, def.documentation ? el('div', { class: 'doc', text: def.documentation }) : '', error);
    fields.set(def.name, { input, error, box });
    container.append(el('label', { for: id }, def.name, def.required ? el('span', { class: 'required', text: ' *' }) : ''), box);
  }

  function values() {
    const config = { 'connector.class': plugin };
    for (const [key, { input }] of fields) {
      const value = input.value.trim();
      if (value !== '') config[key] = value;
    }
    return config;
  }

  async function validate() {
    for (const { error, box } of fields.values()) {
      error.textContent = '';
      box.classList.remove('invalid');
    }
    const answer = await api('PUT', '/connector-plugins/' + encodeURIComponent(plugin) + '/config/validate', values());
    const elsewhere = [];
    for (const config of answer.configs || []) {
      const errors = config.value.errors || [];
      if (!errors.length) continue;
      const target = fields.get(config.value.name);
      if (target) {
        target.error.textContent = errors.join(' ');
        target.box.classList.add('invalid');
        const folded = target.box.closest('details');
        if (folded) folded.open = true;
      } else {
        elsewhere.push(config.value.name + ': ' + errors.join(' '));
      }
    }
    if (answer.error_count) message(note, 'error', answer.error_count + ' problem(s) in this config' + (elsewhere.length ? ': ' + elsewhere.join('; ') : '; see the keys marked below.'));
    else message(note, 'ok', 'The config is valid.');
    return answer.error_count;
  }

  async function create() {
    try {
      if ((await validate()) > 0) return;
      const config = values();
      const created = await api('POST', '/connectors', { name: config.name, config });
      app.flash = null;
      location.hash = '#/connector/' + encodeURIComponent(created.name);
    } catch (e) {
      message(note, 'error', e.message);
    }
  }

  return {
    title: 'New connector',
    nav: 'nav-plugins',
    mount(main) {
      main.append(
        el('p', {}, el('a', { href: '#/plugins', text: '← Plugins' })),
        el('h1', {}, 'New ', plugin, ' connector'),
        note,
        form,
        el(
          'div',
          { class: 'actions' },
          el('button', { type: 'button', id: 'validate', onclick: () => validate().catch((e) => message(note, 'error', e.message)), text: 'Validate' }),
          el('button', { type: 'button', class: 'primary', id: 'create', onclick: create, text: 'Create' }),
        ),
      );
    },
    async refresh() {
      if (mounted) return;
      const defs = await api('GET', '/connector-plugins/' + encodeURIComponent(plugin) + '/config');
      mounted = true;
      // The connector's name, the plugin's own keys, the host keys most connectors set,
      // then the rest of the host's keys (Connect's `Common` group) folded away.
      const rest = defs.filter((d) => d.name !== 'name' && d.name !== 'connector.class');
      const host = rest.filter((d) => d.group === 'Common');
      const sections = [
        ['Connector', defs.filter((d) => d.name === 'name'), form],
        [plugin + ' keys', rest.filter((d) => d.group !== 'Common'), form],
        ['Host keys', host.filter((d) => COMMON_HOST_KEYS.includes(d.name)), form],
      ];
      const more = el('div', { class: 'form' });
      sections.push(['', host.filter((d) => !COMMON_HOST_KEYS.includes(d.name)), more]);
      for (const [title, keys, container] of sections) {
        if (!keys.length) continue;
        if (title) container.append(el('div', { class: 'group', text: title }));
        for (const def of keys) field(def, container);
      }
      if (more.firstChild) form.append(el('details', { class: 'more-keys' }, el('summary', { text: 'More host keys (sandbox limits, errors, Kafka, exactly-once)' }), more));
      if (!fields.has('name')) field({ name: 'name', type: 'STRING', required: true, documentation: 'connector name' }, form);
    },
  };
}

// ---- Routing and the refresh loop ----------------------------------------------------

function viewFor(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/');
  let arg = parts.length > 1 ? parts.slice(1).join('/') : '';
  try {
    arg = decodeURIComponent(arg);
  } catch {
    // Typed by hand (a connector named `100%`): taken as it is.
  }
  switch (parts[0]) {
    case 'connector':
      return connectorView(arg);
    case 'plugins':
      return pluginsView();
    case 'new':
      return newConnectorView(arg);
    default:
      return overviewView();
  }
}

function route() {
  if (!worker) about();
  const generation = ++app.generation;
  const view = viewFor(location.hash);
  app.view = view;
  document.title = 'Sluice · ' + view.title;
  for (const id of ['nav-connectors', 'nav-plugins']) document.getElementById(id).classList.toggle('active', id === view.nav);
  view.mount(clear(document.getElementById('main')));
  loop(view, generation);
}

async function loop(view, generation) {
  while (generation === app.generation && app.view === view) {
    const started = performance.now();
    try {
      await view.refresh();
      void document.body.offsetHeight; // include style and layout in the figure
      const took = performance.now() - started;
      document.body.dataset.refreshMs = took.toFixed(1);
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
      footer('refreshed in ' + took.toFixed(0) + ' ms');
      delete document.body.dataset.stale;
    } catch (e) {
      if (e.status === 401) return;
      document.body.dataset.stale = 'true';
      footer('refresh failed: ' + e.message + '; what is shown may be out of date');
    }
    await new Promise((resolve) => setTimeout(resolve, REFRESH_MS));
  }
}

let worker = '';
function footer(text) {
  document.getElementById('footer').textContent = (worker ? worker + ' · ' : '') + text;
}

async function start() {
  document.getElementById('sign-out').addEventListener('click', () => {
    app.token = null;
    app.lastTotals = null;
    app.history.clear();
    showSignIn('');
  });
  window.addEventListener('hashchange', () => {
    if (!app.signingIn) route();
  });
  showWho();
  if (await about()) route();
}

// The worker's version for the footer; false when the API wants a token first.
async function about() {
  try {
    const root = await api('GET', '/');
    worker = 'Sluice ' + root.version + ' (' + String(root.commit).slice(0, 12) + ')';
  } catch (e) {
    if (e.status === 401) return false;
  }
  return true;
}

start();
