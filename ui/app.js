// berth's web UI: plain JavaScript, no library, no build step.  It reads
// the /v1/ views of the berthd that serves it, follows /v1/event/stream to
// refresh what is shown, and posts the operator's actions (alloc stop,
// volume detach, node drain) to the same API the shell's commands use.
// Everything shown is set as text (never as HTML).
'use strict';

const TOKEN_KEY = 'berth-token';
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  page: null,      // the route shown: {page, args}
  data: null,      // what its load answered
  error: null,     // or why it failed
  seq: 0,          // the newest load (older answers are dropped)
  refreshTimer: null,
  stream: null,    // the AbortController of the event stream
  filters: {},     // per page, kept while the page is open
};

// --- helpers -----------------------------------------------------------------

// An element: h('td', {class: 'num', dataset: {x: 1}}, 'text', child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style') Object.assign(el.style, v);  // CSSOM: allowed by the CSP
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const enc = encodeURIComponent;

// "3 s ago", "5 min ago", "2 h ago", "4 d ago"; "-" for 0.
function ago(ms) {
  if (!ms) return '-';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return Math.floor(s / 86400) + ' d ago';
}

// "in 3 s" ("now" once passed).
function until(ms) {
  if (!ms) return '-';
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return 'now';
  if (s < 60) return 'in ' + s + ' s';
  if (s < 3600) return 'in ' + Math.floor(s / 60) + ' min';
  return 'in ' + Math.floor(s / 3600) + ' h';
}

// A time that stays current: the ticker rewrites it every second.
function when(ms, future) {
  return h('span', {class: 'when', title: ms ? new Date(ms).toLocaleString() : null,
                    dataset: {ms: String(ms || 0), future: future ? '1' : ''}},
           future ? until(ms) : ago(ms));
}

function tick() {
  for (const el of document.querySelectorAll('.when')) {
    const ms = Number(el.dataset.ms);
    el.textContent = el.dataset.future ? until(ms) : ago(ms);
  }
}

// "1 GiB", "500 MiB", "1.5 TiB"; "-" for 0.
function size(bytes) {
  if (!bytes || bytes <= 0) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = bytes, u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  const text = v >= 10 || u === 0 ? Math.round(v).toString() : v.toFixed(1).replace(/\.0$/, '');
  return text + ' ' + units[u];
}

// A state in colour and in words: tone is ok, warn, bad, info or mute.
function badge(text, tone, title) {
  return h('span', {class: 'badge tone-' + tone, title: title || null, dataset: {state: text}}, text);
}

const ALLOC_TONES = {pending: 'info', running: 'ok', complete: 'mute', failed: 'bad', lost: 'bad'};
const CLAIM_TONES = {taken: 'ok', unpublishing: 'warn', 'node-detached': 'warn',
                     'controller-detached': 'warn', 'ready-to-free': 'mute'};

function volumeUse(v) {
  if (!v.claims.length) return badge('free', 'mute');
  if (v.claims.some(c => c.state !== 'taken')) return badge('releasing', 'warn');
  const parts = [];
  if (v.write_claims) parts.push(v.write_claims + ' writer' + (v.write_claims > 1 ? 's' : ''));
  if (v.read_claims) parts.push(v.read_claims + ' reader' + (v.read_claims > 1 ? 's' : ''));
  return badge('claimed', 'info', parts.join(', '));
}

function volumeHealth(v) {
  if (v.condition === 'abnormal') return badge('abnormal', 'bad', v.condition_message);
  if (!v.healthy) return badge('unhealthy', 'bad', v.health_description);
  return badge('healthy', 'ok');
}

function availability(v) {
  if (v.availability === 'active') return null;
  return badge(v.availability === 'pause' ? 'paused' : 'draining', 'warn');
}

function nodeStatus(n) {
  return n.status === 'ready' ? badge('ready', 'ok') : badge(n.status, 'bad');
}

function nodeDrain(n) {
  if (n.drain) {
    const left = n.drain.allocs_left + ' alloc(s), ' + n.drain.claims_left + ' claim(s) left';
    return badge(n.drain.forced ? 'draining (forced)' : 'draining', 'warn', left);
  }
  if (!n.eligible) return badge('ineligible', 'warn');
  return badge('eligible', 'ok');
}

// healthy of expected: ok when all, bad when none, warn between.
function health(healthy, expected) {
  const tone = expected === 0 ? 'mute' : healthy === expected ? 'ok' : healthy === 0 ? 'bad' : 'warn';
  return badge(healthy + ' / ' + expected + ' healthy', tone);
}

// The access mode the claims use ("-" while it has none).
function accessMode(v) {
  return v.access_mode && v.access_mode !== 'unknown' ? v.access_mode : '-';
}

function capacity(v) {
  if (v.capacity_bytes > 0) return size(v.capacity_bytes);
  if (v.capacity_min > 0) return '≥ ' + size(v.capacity_min);
  return '-';
}

const volumeLink = (ns, id) => h('a', {href: '#/volume/' + enc(ns) + '/' + enc(id)}, id);
const nodeLink = id => id ? h('a', {href: '#/node/' + enc(id)}, id) : '-';
const allocLink = id => h('a', {href: '#/alloc/' + enc(id)}, id);
const pluginLink = id => h('a', {href: '#/plugin/' + enc(id)}, id);

// A table: columns [{label, cell: row => node|text, class}], a row's
// attributes from rowAttrs.
function table(columns, rows, rowAttrs, emptyText) {
  if (!rows.length) return h('div', {class: 'panel empty'}, emptyText || 'Nothing here.');
  return h('div', {class: 'panel table-wrap'},
    h('table', {},
      h('thead', {}, h('tr', {}, columns.map(c => h('th', {scope: 'col'}, c.label)))),
      h('tbody', {}, rows.map(r => h('tr', rowAttrs ? rowAttrs(r) : {},
        columns.map(c => h('td', {class: c.class || null, 'data-label': c.label || null}, c.cell(r))))))));
}

function facts(pairs) {
  return h('dl', {class: 'facts'}, pairs.filter(Boolean).map(([k, v]) =>
    h('div', {class: 'fact'}, h('dt', {}, k), h('dd', {}, v === '' || v === undefined ? '-' : v))));
}

function title(text, ...badges) { return h('h1', {}, text, ...badges); }

// --- the API -----------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, options) {
  const o = options || {};
  const headers = {};
  if (state.token) headers['X-Berth-Token'] = state.token;
  if (o.body) headers['Content-Type'] = 'application/json';
  let r;
  try {
    r = await fetch(path, {method: o.method || 'GET', headers, cache: 'no-store',
                           body: o.body ? JSON.stringify(o.body) : undefined});
  } catch (e) {
    throw new ApiError(0, 'berthd does not answer (' + e.message + ')');
  }
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    const message = body && body.error ? body.error : 'HTTP ' + r.status;
    if (r.status === 403) askToken(message);
    throw new ApiError(r.status, message);
  }
  return body;
}

// --- dialogs -----------------------------------------------------------------

// Asks for confirmation in the page's own dialog; resolves to true on OK.
function confirmDialog(heading, text, okLabel, extra) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = heading;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  document.getElementById('confirm-extra').replaceChildren(...(extra ? [extra] : []));
  d.returnValue = '';
  return new Promise(resolve => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), {once: true});
    d.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}

let tokenDialogOpen = false;
function askToken(reason) {
  const d = document.getElementById('token-dialog');
  document.getElementById('token-reason').textContent = reason || '';
  if (tokenDialogOpen) return;
  tokenDialogOpen = true;
  document.getElementById('token-input').value = '';
  d.returnValue = '';
  d.addEventListener('close', () => {
    tokenDialogOpen = false;
    const input = document.getElementById('token-input');
    if (d.returnValue === 'save' && input.value.trim()) setToken(input.value.trim());
    else if (d.returnValue === 'clear') setToken('');
    input.value = '';
  }, {once: true});
  d.showModal();
}

function setToken(token) {
  state.token = token;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  updateTokenButton();
  follow();  // the stream again, with the new token
  refresh();
}

function updateTokenButton() {
  document.getElementById('token-button').textContent = state.token ? 'Token ✓' : 'Token';
}

let toastTimer = null;
function toast(text, bad) {
  const t = document.getElementById('toast');
  t.textContent = text;
  t.className = 'toast' + (bad ? ' bad' : '');
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, bad ? 12000 : 6000);
}

// An action: confirmed, posted, its answer shown, the page refreshed.
async function act(button, heading, text, okLabel, path, body, extra) {
  if (!await confirmDialog(heading, text, okLabel, extra)) return;
  button.disabled = true;
  toast(heading.replace(/\?$/, '') + '…');
  try {
    const answer = await api(path, {method: 'POST', body: typeof body === 'function' ? body() : body});
    toast(answer && answer.message ? answer.message : 'Done.');
  } catch (e) {
    toast(e.message, true);
  } finally {
    button.disabled = false;
    refresh();
  }
}

function stopButton(alloc) {
  const b = h('button', {type: 'button', class: 'danger small', dataset: {action: 'stop', alloc: alloc.id}},
              'Stop');
  b.addEventListener('click', () => act(b, 'Stop alloc ' + alloc.id + '?',
    'Its command is terminated (SIGTERM, then SIGKILL after 5 s) and its claims are released. ' +
    'The same as `berth alloc stop ' + alloc.id + '`.', 'Stop alloc', '/v1/alloc/stop', {id: alloc.id}));
  return b;
}

function detachButton(v, node) {
  const b = h('button', {type: 'button', class: 'danger small', dataset: {action: 'detach', node}},
              'Detach from ' + node);
  b.addEventListener('click', () => act(b, 'Detach volume ' + v.id + ' from node ' + node + '?',
    'Every claim on ' + node + ' of allocs that are stopped, failed, lost or gone is released ' +
    '(NodeUnpublish, NodeUnstage, ControllerUnpublish); claims of running allocs are kept. ' +
    'The same as `berth volume detach ' + v.id + ' ' + node + '`.', 'Detach',
    '/v1/volume/detach', {namespace: v.namespace, id: v.id, node}));
  return b;
}

function drainButtons(n) {
  if (n.drain) {
    const b = h('button', {type: 'button', class: 'plain', dataset: {action: 'cancel-drain'}}, 'Cancel drain');
    b.addEventListener('click', () => act(b, 'Cancel the drain of node ' + n.id + '?',
      'The node becomes eligible again; what was stopped stays stopped.', 'Cancel drain',
      '/v1/node/drain', {id: n.id, disable: true}));
    return [b];
  }
  const deadline = h('select', {id: 'drain-deadline'},
    [['1h', '1 hour'], ['30m', '30 minutes'], ['10m', '10 minutes'], ['none', 'no deadline'],
     ['force', 'now (force)']].map(([v, t]) => h('option', {value: v}, t)));
  const keep = h('input', {type: 'checkbox', id: 'drain-keep-plugins'});
  const extra = h('div', {},
    h('label', {}, 'Deadline for the allocs to stop', deadline),
    h('label', {}, keep, 'Keep its plugin instances registered'));
  const b = h('button', {type: 'button', class: 'danger', dataset: {action: 'drain'}}, 'Drain…');
  b.addEventListener('click', () => act(b, 'Drain node ' + n.id + '?',
    'The node takes no new allocs or claims; its allocs are stopped and their claims released. ' +
    'After the deadline the rest is released without the node. It stays ineligible until ' +
    'enabled again.', 'Drain', '/v1/node/drain', () => {
      const body = {id: n.id, keep_plugins: keep.checked};
      if (deadline.value === 'force') body.force = true;
      else if (deadline.value === 'none') body.no_deadline = true;
      else body.deadline = deadline.value;
      return body;
    }, extra));
  return [b];
}

// --- pages -------------------------------------------------------------------

// A page: its title (navigation), the topics that refresh it, what it
// loads and how it draws; optional filters drawn once while it is open.

function filterBar(page, fields, data) {
  const f = state.filters[page] || (state.filters[page] = {});
  const bar = h('div', {class: 'toolbar', role: 'search'});
  for (const field of fields) {
    let el;
    if (field.options) {
      el = h('select', {'aria-label': field.label, dataset: {filter: field.key}},
        h('option', {value: ''}, field.label + ': any'),
        field.options(data).map(o => h('option', {value: o}, o)));
    } else {
      el = h('input', {type: 'search', placeholder: field.label, 'aria-label': field.label,
                       dataset: {filter: field.key}});
    }
    el.value = f[field.key] || '';
    el.addEventListener('input', () => { f[field.key] = el.value; draw(); });
    bar.append(el);
  }
  bar.append(h('span', {class: 'count', id: 'count'}));
  return bar;
}

function filtered(page, rows, match) {
  const f = state.filters[page] || {};
  const out = rows.filter(r => match(r, f));
  const count = document.getElementById('count');
  if (count) count.textContent = out.length === rows.length ? rows.length + ' shown'
                                                            : out.length + ' of ' + rows.length + ' shown';
  return out;
}

const uniq = xs => [...new Set(xs)].filter(Boolean).sort();
const contains = (text, needle) => !needle || String(text).toLowerCase().includes(needle.toLowerCase());

function volumeStateName(v) {
  if (!v.claims.length) return 'free';
  return v.claims.some(c => c.state !== 'taken') ? 'releasing' : 'claimed';
}

const volumesPage = {
  nav: 'volume', topics: ['volume', 'claim', 'plugin'],
  load: () => api('/v1/volumes?namespace=*'),
  filters: data => filterBar('volumes', [
    {key: 'q', label: 'Filter by id, name or external id'},
    {key: 'ns', label: 'Namespace', options: d => uniq(d.map(v => v.namespace))},
    {key: 'plugin', label: 'Plugin', options: d => uniq(d.map(v => v.plugin_id))},
    {key: 'group', label: 'Volume group', options: d => uniq(d.map(v => v.group).filter(g => g))},
    {key: 'state', label: 'State', options: () => ['free', 'claimed', 'releasing', 'unhealthy']},
  ], data),
  render: data => {
    const rows = filtered('volumes', data, (v, f) =>
      (contains(v.id, f.q) || contains(v.name, f.q) || contains(v.external_id, f.q)) &&
      (!f.ns || v.namespace === f.ns) && (!f.plugin || v.plugin_id === f.plugin) &&
      (!f.group || v.group === f.group) &&
      (!f.state || (f.state === 'unhealthy' ? !v.healthy || v.condition === 'abnormal'
                                            : volumeStateName(v) === f.state)));
    return table([
      {label: 'Volume', cell: v => volumeLink(v.namespace, v.id)},
      {label: 'Namespace', cell: v => v.namespace},
      {label: 'Plugin', cell: v => pluginLink(v.plugin_id)},
      {label: 'Use', cell: v => [volumeUse(v), ' ', availability(v)]},
      {label: 'Claims', cell: v => v.claims.length ? v.claims.map(c => c.alloc_id + ' on ' + c.node_id).join(', ') : '-'},
      {label: 'Access mode', cell: v => accessMode(v)},
      {label: 'Capacity', class: 'num', cell: capacity},
      {label: 'Health', cell: volumeHealth},
    ], rows, v => ({dataset: {volume: v.namespace + '/' + v.id}}),
    data.length ? 'No volume matches the filters.' : 'No volumes are registered. Register one with `berth volume register FILE` or create one with `berth volume create FILE`.');
  },
  heading: () => [title('Volumes'), h('p', {class: 'subtitle'}, 'Every volume of every namespace, with its claims and health.')],
};

const volumePage = {
  nav: 'volume', topics: ['volume', 'claim', 'plugin'],
  load: (ns, id) => api('/v1/volume?namespace=' + enc(ns) + '&id=' + enc(id)),
  render: v => {
    const nodes = uniq(v.claims.map(c => c.node_id));
    const cond = v.condition === 'abnormal'
      ? [badge('abnormal', 'bad'), ' ', v.condition_message, v.condition_since_ms ? [' (since ', when(v.condition_since_ms), ')'] : null]
      : badge('ok', 'ok');
    const exp = v.expansion;
    return h('div', {},
      h('div', {class: 'crumbs'}, h('a', {href: '#/volumes'}, 'Volumes'), ' / ', v.namespace),
      title(v.id, volumeUse(v), volumeHealth(v), availability(v)),
      v.name && v.name !== v.id ? h('p', {class: 'subtitle'}, v.name) : null,
      facts([
        ['Namespace', v.namespace],
        ['Plugin', pluginLink(v.plugin_id)],
        ['External id', h('span', {class: 'mono'}, v.external_id || '-')],
        v.group ? ['Volume group', v.group] : null,
        ['Capacity', [capacity(v), h('span', {class: 'small'},
          'min ' + size(v.capacity_min) + ', max ' + size(v.capacity_max))]],
        ['Access mode in use', accessMode(v)],
        ['Capabilities', v.capabilities.map(c => c.access_mode + ' (' + c.attachment_mode + ')').join(', ')],
        ['Condition', cond],
        ['Health', [volumeHealth(v), v.health_description ? h('span', {class: 'small'}, v.health_description) : null]],
        ['Availability', v.availability],
        exp ? ['Expansion', ['to ' + size(exp.required_bytes), h('span', {class: 'small'},
          exp.controller_done ? 'controller done' : 'controller pending')]] : null,
        v.snapshot_id ? ['From snapshot', v.snapshot_id] : null,
        v.clone_id ? ['Cloned from', v.clone_id] : null,
        ['File system', v.mount_options.fs_type || '-'],
        ['Modified at index', v.modify_index],
      ]),
      h('h2', {}, 'Claims'),
      table([
        {label: 'Alloc', cell: c => allocLink(c.alloc_id)},
        {label: 'Node', cell: c => nodeLink(c.node_id)},
        {label: 'Mode', cell: c => c.mode + ' (' + c.access_mode + ')'},
        {label: 'State', cell: c => badge(c.state, CLAIM_TONES[c.state] || 'mute')},
        {label: 'Claimed', cell: c => when(c.claimed_at_ms)},
        {label: 'Release', cell: c => c.state === 'taken' && !c.release_attempts ? '-' : [
          c.release_reason || 'releasing',
          c.release_attempts ? h('div', {class: 'retry'}, c.release_attempts + ' attempt(s); next retry ',
                                 when(c.release_next_retry_ms, true)) : null,
          c.release_error ? h('div', {class: 'error-text'}, 'last error: ' + c.release_error) : null]},
      ], v.claims, c => ({dataset: {claim: c.alloc_id, node: c.node_id}}), 'No claims: the volume is free.'),
      nodes.length ? h('div', {class: 'actions'}, nodes.map(n => detachButton(v, n))) : null,
      v.usage.length ? [h('h2', {}, 'Usage per node'), table([
        {label: 'Node', cell: u => nodeLink(u.node_id)},
        {label: 'Used', class: 'num', cell: u => size(u.used_bytes)},
        {label: 'Available', class: 'num', cell: u => size(u.available_bytes)},
        {label: 'Capacity', class: 'num', cell: u => size(u.capacity_bytes)},
        {label: 'Condition', cell: u => u.condition === 'abnormal' ? badge('abnormal', 'bad', u.condition_message)
                                       : u.condition === 'ok' ? badge('ok', 'ok') : '-'},
        {label: 'Measured', cell: u => when(u.updated_at_ms)},
      ], v.usage)] : null);
  },
};

const pluginsPage = {
  nav: 'plugin', topics: ['plugin'],
  load: () => api('/v1/plugins'),
  render: data => {
    if (!data.length) return h('div', {class: 'panel empty'}, 'No plugins: a client fingerprints its plugins when it starts.');
    const meter = (healthy, expected) => {
      const tone = healthy === expected ? '' : healthy === 0 ? ' bad' : ' warn';
      const pct = expected ? Math.round(100 * healthy / expected) : 0;
      return h('div', {class: 'meter' + tone, role: 'img', 'aria-label': healthy + ' of ' + expected + ' healthy'},
               h('span', {style: {width: pct + '%'}}));
    };
    return h('div', {class: 'cards'}, data.map(p => h('section', {class: 'card', dataset: {plugin: p.id}},
      h('h3', {}, pluginLink(p.id), p.provider ? h('span', {class: 'note'}, p.provider + ' ' + p.provider_version) : null),
      h('div', {}, 'Controllers ', health(p.controllers_healthy, p.controllers_expected),
        p.controller_required ? '' : h('span', {class: 'note'}, ' (not required)')),
      meter(p.controllers_healthy, p.controllers_expected),
      h('div', {}, 'Nodes ', health(p.nodes_healthy, p.nodes_expected)),
      meter(p.nodes_healthy, p.nodes_expected),
      h('div', {class: 'note'}, 'On ', uniq(p.nodes.concat(p.controllers).map(i => i.node_id)).length + ' node(s)'))));
  },
  heading: () => [title('Plugins'), h('p', {class: 'subtitle'}, 'CSI plugins: healthy and expected controllers and nodes.')],
};

function capabilitiesOf(i) {
  const names = ['publish_unpublish', 'stage_unstage', 'create_delete_snapshot', 'list_snapshots',
                 'clone_volume', 'modify_volume', 'list_volumes', 'get_volume', 'volume_condition',
                 'get_volume_stats', 'group_snapshot'];
  return names.filter(n => i[n]).map(n => n.replace(/_/g, ' ')).join(', ') || '-';
}

const pluginPage = {
  nav: 'plugin', topics: ['plugin'],
  load: id => api('/v1/plugin?id=' + enc(id)),
  render: p => {
    const instances = p.controllers.map(i => Object.assign({type: 'controller'}, i))
      .concat(p.nodes.map(i => Object.assign({type: 'node'}, i)))
      .sort((a, b) => a.node_id.localeCompare(b.node_id) || a.type.localeCompare(b.type));
    return h('div', {},
      h('div', {class: 'crumbs'}, h('a', {href: '#/plugins'}, 'Plugins')),
      title(p.id),
      facts([
        ['Provider', (p.provider || '-') + ' ' + (p.provider_version || '')],
        ['Controllers', health(p.controllers_healthy, p.controllers_expected)],
        ['Nodes', health(p.nodes_healthy, p.nodes_expected)],
        ['Controller required', p.controller_required ? 'yes' : 'no'],
      ]),
      h('h2', {}, 'Instances per node'),
      table([
        {label: 'Node', cell: i => nodeLink(i.node_id)},
        {label: 'Type', cell: i => i.type},
        {label: 'Health', cell: i => [i.healthy ? badge('healthy', 'ok') : badge('unhealthy', 'bad'),
                                      i.health_description && i.health_description !== 'healthy'
                                        ? h('div', {class: 'note'}, i.health_description) : null]},
        {label: 'Version', cell: i => i.provider_version || '-'},
        {label: 'Capabilities', cell: capabilitiesOf},
        {label: 'Max volumes', class: 'num', cell: i => i.max_volumes || 'unlimited'},
        {label: 'Updated', cell: i => when(i.updated_at_ms)},
      ], instances, i => ({dataset: {instance: i.node_id + '/' + i.type}}), 'No instances.'));
  },
};

const nodesPage = {
  nav: 'node', topics: ['node'],
  load: () => api('/v1/nodes'),
  filters: data => filterBar('nodes', [
    {key: 'q', label: 'Filter by id'},
    {key: 'status', label: 'Status', options: d => uniq(d.map(n => n.status))},
  ], data),
  render: data => table([
    {label: 'Node', cell: n => nodeLink(n.id)},
    {label: 'Status', cell: nodeStatus},
    {label: 'Scheduling', cell: nodeDrain},
    {label: 'Client', cell: n => n.has_client ? badge('connected', 'ok') : badge('none', 'mute')},
    {label: 'Last seen', cell: n => when(n.last_seen_ms || n.last_heartbeat_ms)},
    {label: 'Plugins', cell: n => n.plugin_ids.length ? n.plugin_ids.join(', ') : '-'},
    {label: 'Address', cell: n => n.address || '-'},
  ], filtered('nodes', data, (n, f) => contains(n.id, f.q) && (!f.status || n.status === f.status)),
  n => ({dataset: {node: n.id}}), 'No nodes: a client registers its node when it starts.'),
  heading: () => [title('Nodes'), h('p', {class: 'subtitle'}, 'The hosts of the cluster: status, drains and eligibility.')],
};

const nodePage = {
  nav: 'node', topics: ['node', 'volume', 'claim', 'alloc'],
  load: id => api('/v1/node?id=' + enc(id)),
  render: n => {
    const claims = [];
    for (const v of n.volumes) for (const c of v.claims) if (c.node_id === n.id) claims.push({v, c});
    const d = n.drain;
    return h('div', {},
      h('div', {class: 'crumbs'}, h('a', {href: '#/nodes'}, 'Nodes')),
      title(n.id, nodeStatus(n), nodeDrain(n)),
      facts([
        ['Status', nodeStatus(n)],
        ['Scheduling', nodeDrain(n)],
        d ? ['Drain', [d.allocs_left + ' alloc(s), ' + d.claims_left + ' claim(s) left',
                       h('span', {class: 'small'}, 'started ', when(d.started_at_ms),
                         d.deadline_ms ? [', deadline ', when(d.deadline_ms, true)] : ', no deadline')]] : null,
        n.drained_at_ms ? ['Drained', when(n.drained_at_ms)] : null,
        ['Client', n.has_client ? 'connected' : 'none'],
        ['Last seen', when(n.last_seen_ms || n.last_heartbeat_ms)],
        ['Address', n.address || '-'],
        ['Plugins', n.plugin_ids.length ? n.plugin_ids.map(p => [pluginLink(p), ' ']) : '-'],
      ]),
      h('div', {class: 'actions'}, drainButtons(n)),
      h('h2', {}, 'Volumes published here'),
      table([
        {label: 'Volume', cell: x => volumeLink(x.v.namespace, x.v.id)},
        {label: 'Alloc', cell: x => allocLink(x.c.alloc_id)},
        {label: 'Mode', cell: x => x.c.mode},
        {label: 'State', cell: x => badge(x.c.state, CLAIM_TONES[x.c.state] || 'mute')},
        {label: 'Claimed', cell: x => when(x.c.claimed_at_ms)},
        {label: 'Capacity', class: 'num', cell: x => capacity(x.v)},
      ], claims, x => ({dataset: {claim: x.c.alloc_id, volume: x.v.namespace + '/' + x.v.id}}),
      'No volume is claimed on this node.'),
      h('h2', {}, 'Allocs'),
      allocTable(n.allocs, 'No allocs on this node.'));
  },
};

function allocTable(allocs, emptyText) {
  return table([
    {label: 'Alloc', cell: a => allocLink(a.id)},
    {label: 'Namespace', cell: a => a.namespace},
    {label: 'Node', cell: a => nodeLink(a.node_id)},
    {label: 'Group', cell: a => a.group || '-'},
    {label: 'State', cell: a => badge(a.state, ALLOC_TONES[a.state] || 'mute', a.message)},
    {label: 'Volumes', cell: a => a.volumes.length
      ? a.volumes.map((v, i) => [i ? ', ' : '', v.name + '=', volumeLink(a.namespace, v.volume_id),
                                 v.read_only ? ' (ro)' : ''])
      : '-'},
    {label: 'Command', cell: a => a.command.length ? h('span', {class: 'mono'}, a.command.join(' ')) : '-'},
    {label: 'Created', cell: a => when(a.created_at_ms)},
    {label: '', cell: a => a.state === 'running' || a.state === 'pending' ? stopButton(a) : null},
  ], allocs, a => ({dataset: {alloc: a.id, state: a.state}}), emptyText);
}

const allocsPage = {
  nav: 'alloc', topics: ['alloc'],
  load: () => api('/v1/allocs?namespace=*'),
  filters: data => filterBar('allocs', [
    {key: 'q', label: 'Filter by id'},
    {key: 'state', label: 'State', options: () => ['pending', 'running', 'complete', 'failed', 'lost']},
    {key: 'node', label: 'Node', options: d => uniq(d.map(a => a.node_id))},
    {key: 'group', label: 'Group', options: d => uniq(d.map(a => a.group).filter(g => g))},
  ], data),
  render: data => allocTable(
    filtered('allocs', data, (a, f) => contains(a.id, f.q) && (!f.state || a.state === f.state) &&
                                       (!f.node || a.node_id === f.node) &&
                                       (!f.group || a.group === f.group)),
    data.length ? 'No alloc matches the filters.' : 'No allocs. Run one with `berth alloc run`.'),
  heading: () => [title('Allocs'), h('p', {class: 'subtitle'}, 'Workloads and the volumes they claim.')],
};

const allocPage = {
  nav: 'alloc', topics: ['alloc', 'claim'],
  load: id => api('/v1/alloc?id=' + enc(id)),
  render: a => h('div', {},
    h('div', {class: 'crumbs'}, h('a', {href: '#/allocs'}, 'Allocs')),
    title(a.id, badge(a.state, ALLOC_TONES[a.state] || 'mute')),
    facts([
      ['Namespace', a.namespace],
      ['Node', nodeLink(a.node_id)],
      a.group ? ['Group', a.group] : null,
      a.replaces ? ['Replaces', allocLink(a.replaces)] : null,
      ['State', badge(a.state, ALLOC_TONES[a.state] || 'mute')],
      a.message ? ['Message', a.message] : null,
      a.state === 'complete' || a.state === 'failed' ? ['Exit code', String(a.exit_code)] : null,
      ['Command', a.command.length ? h('span', {class: 'mono'}, a.command.join(' ')) : 'none (runs until stopped)'],
      ['Created', when(a.created_at_ms)],
      ['Modified', when(a.modified_at_ms)],
    ]),
    h('div', {class: 'actions'}, a.state === 'running' || a.state === 'pending' ? stopButton(a) : null),
    h('h2', {}, 'Volumes'),
    table([
      {label: 'Name', cell: v => v.name},
      {label: 'Volume', cell: v => volumeLink(a.namespace, v.volume_id)},
      {label: 'Access', cell: v => v.read_only ? 'read' : 'write'},
      {label: 'Path', cell: v => h('span', {class: 'mono'}, v.published_path || '-')},
      {label: 'Environment', cell: v => h('span', {class: 'mono'}, v.env)},
    ], a.volumes, null, 'No volumes.'),
    h('h2', {}, 'Claims'),
    table([
      {label: 'Volume', cell: c => volumeLink(a.namespace, c.volume_id)},
      {label: 'Node', cell: c => nodeLink(c.node_id)},
      {label: 'Mode', cell: c => c.mode},
      {label: 'State', cell: c => badge(c.state, CLAIM_TONES[c.state] || 'mute')},
      {label: 'Release', cell: c => c.release_error ? h('span', {class: 'error-text'}, c.release_error)
                                   : c.release_attempts ? c.release_attempts + ' attempt(s)' : '-'},
    ], a.claims, c => ({dataset: {claim: c.volume_id}}), 'The alloc holds no claims.')),
};

const peersPage = {
  nav: 'peers', topics: [], poll: 5000,
  load: () => api('/v1/raft/peers'),
  render: data => table([
    {label: 'Server', cell: p => p.id},
    {label: 'Role', cell: p => p.error ? badge('unreachable', 'bad', p.error)
                               : badge(p.role, p.role === 'leader' ? 'ok' : p.role === 'follower' ? 'info' : 'warn')},
    {label: 'Raft address', cell: p => h('span', {class: 'mono'}, p.address || '-')},
    {label: 'API address', cell: p => h('span', {class: 'mono'}, p.api_address || '-')},
    {label: 'Term', class: 'num', cell: p => p.term},
    {label: 'Commit index', class: 'num', cell: p => p.commit_index},
    {label: 'Last index', class: 'num', cell: p => p.last_index},
    {label: 'Applied index', class: 'num', cell: p => p.applied_index},
  ], data, p => ({dataset: {peer: p.id}}), 'No servers answered.'),
  heading: () => [title('Servers'), h('p', {class: 'subtitle'}, 'The Raft peers (berth operator raft list-peers); refreshed every 5 s.')],
};

const ROUTES = [
  [/^#\/volumes$/, volumesPage],
  [/^#\/volume\/([^/]+)\/([^/]+)$/, volumePage],
  [/^#\/plugins$/, pluginsPage],
  [/^#\/plugin\/([^/]+)$/, pluginPage],
  [/^#\/nodes$/, nodesPage],
  [/^#\/node\/([^/]+)$/, nodePage],
  [/^#\/allocs$/, allocsPage],
  [/^#\/alloc\/([^/]+)$/, allocPage],
  [/^#\/peers$/, peersPage],
];

// --- drawing -----------------------------------------------------------------

const view = () => document.getElementById('view');

function route() {
  for (const [re, page] of ROUTES) {
    const m = location.hash.match(re);
    if (m) return {page, args: m.slice(1).map(decodeURIComponent)};
  }
  return null;
}

function show() {
  const r = route();
  if (!r) { location.replace('#/volumes'); return; }
  state.page = r;
  state.data = null;
  state.error = null;
  for (const a of document.querySelectorAll('[data-nav]'))
    a.classList.toggle('current', a.dataset.nav === r.page.nav);
  const v = view();
  v.replaceChildren(
    h('div', {id: 'heading'}, r.page.heading ? r.page.heading() : null),
    h('div', {id: 'filters'}),
    h('div', {id: 'body', 'aria-live': 'polite', 'aria-busy': 'true'}, h('p', {class: 'note'}, 'Loading…')));
  refresh();
}

// A redraw that changes nothing keeps the elements on the page: a click in
// progress (pressed on one button, released on its copy), the focus and what
// was typed survive the 5 s polls and the event stream's refreshes.
function keepOrReplace(parent, next) {
  const nodes = next instanceof DocumentFragment ? Array.from(next.childNodes) : [next];
  const now = parent.childNodes;
  const same = now.length === nodes.length && nodes.every((n, i) => n.isEqualNode(now[i]));
  if (!same) parent.replaceChildren(...nodes);
}

function draw() {
  const body = document.getElementById('body');
  if (!body || !state.page) return;
  const {page, args} = state.page;
  if (state.error) {
    const e = state.error;
    body.replaceChildren(h('div', {class: 'error-box', role: 'alert', dataset: {status: String(e.status)}},
      h('strong', {}, e.status === 403 ? 'Not allowed: ' : e.status === 404 ? 'Not found: ' : 'Error: '),
      e.message,
      e.status === 403 ? h('div', {}, h('button', {type: 'button', on: {click: () => askToken(e.message)}},
                                        'Enter a token')) : null));
  } else if (state.data !== null) {
    const filters = document.getElementById('filters');
    if (page.filters && !filters.firstChild) filters.append(page.filters(state.data));
    keepOrReplace(body, page.render(state.data, ...args));
  }
  body.setAttribute('aria-busy', 'false');
  document.title = 'berth · ' + (location.hash.slice(2) || 'volumes');
}

async function refresh() {
  if (!state.page) return;
  const r = state.page;
  const seq = ++state.seq;
  try {
    const data = await r.page.load(...r.args);
    if (seq !== state.seq || state.page !== r) return;
    state.data = data;
    state.error = null;
  } catch (e) {
    if (seq !== state.seq || state.page !== r) return;
    state.error = e;
  }
  draw();
}

// Several events in a row refresh once.
function refreshSoon() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, 150);
}

// --- the event stream --------------------------------------------------------

function setLive(mode, text, why) {
  const el = document.getElementById('live');
  el.className = 'live live-' + mode;
  el.textContent = text;
  el.title = why || 'Lists follow the event stream';
  el.dataset.mode = mode;
}

// Follows /v1/event/stream (fetch, so that the token goes in a header):
// every event of a topic the page shows refreshes it; a broken stream is
// followed again after a pause, and the page refreshed for what it missed.
async function follow() {
  if (state.stream) state.stream.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  let pause = 1000;
  while (!ctl.signal.aborted) {
    try {
      const headers = state.token ? {'X-Berth-Token': state.token} : {};
      const r = await fetch('/v1/event/stream', {headers, signal: ctl.signal, cache: 'no-store'});
      if (r.status === 403) {
        let why = 'the token may not read events';
        try { why = (await r.json()).error || why; } catch (e) { /* keep */ }
        setLive('refused', 'not live: refused', why);
        return;  // a new token follows again
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      setLive('on', 'live');
      pause = 1000;
      refreshSoon();  // what changed before the stream started
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffered = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, {stream: true});
        let nl;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          onEvent(line);
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    setLive('off', 'reconnecting…');
    await new Promise(res => setTimeout(res, pause));
    pause = Math.min(pause * 2, 10000);
  }
}

function onEvent(line) {
  if (!line.trim()) return;
  let e;
  try { e = JSON.parse(line); } catch (err) { return; }
  if (e.error) { setLive('off', 'stream ended', e.error); return; }
  if (!e.topic || !state.page) return;  // {} is the stream's heartbeat
  if (state.page.page.topics.includes(e.topic)) refreshSoon();
}

// --- start -------------------------------------------------------------------

function start() {
  updateTokenButton();
  const t = document.getElementById('toast');
  t.addEventListener('click', () => { t.hidden = true; });
  document.getElementById('token-button').addEventListener('click', () => askToken(''));
  window.addEventListener('hashchange', show);
  setInterval(tick, 1000);
  setInterval(() => { if (state.page && state.page.page.poll) refresh(); }, 5000);
  show();
  follow();
}

start();
