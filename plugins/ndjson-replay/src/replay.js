// ndjson-replay: replays bundled newline-delimited JSON files at a configured rate,
// written in JavaScript (componentize-js).
//
// - Each bundled file is one partition, `{"file":"clicks.ndjson"}`; the offset
//   `{"loop":l,"line":n}` is the last line delivered, in loop `l` of `replay.loops`.
// - `tasks.max` splits the files across tasks; a task resumes after its committed offsets.
// - The connector's `tick` reads the committed offsets, logs the progress of each file and
//   asks for a reconfiguration once every file is replayed (the tasks then stop). An
//   offset past the end of a file (the bundled data shrank since it was committed) fails
//   the task with `raise-error`.
//
// `build.mjs` puts the files of `data/` in front of this source as `DATASETS`, and the
// template's `files.js` (`readTextFile`, `listDirectory`) between them.

import { offset, offsets } from 'sluice:connector/offset-storage-reader@0.1.0';
import { requestTaskReconfiguration, raiseError } from 'sluice:connector/connector-context@0.1.0';
import { log } from 'sluice:connector/log@0.1.0';
import { listDirectory, readTextFile } from './files.js';

const VERSION = '0.1.0';
const encoder = new TextEncoder();

const CONFIG_DEF = [
  key('topic', 'string', 'replay', 'high', 'topic the lines go to'),
  key('replay.files', 'list', Object.keys(DATASETS).join(','), 'high',
    `files to replay, comma-separated (bundled: ${Object.keys(DATASETS).join(', ')}; ` +
    'with replay.directory: its *.ndjson files, all of them by default)'),
  key('replay.directory', 'string', '', 'medium',
    'replay the *.ndjson files of this directory instead of the bundled ones (grant it with sandbox.fs.read)'),
  key('replay.rate', 'int', '100', 'medium', 'lines per second per task; 0 means as fast as polled'),
  key('replay.loops', 'int', '1', 'medium', 'times each file is replayed; 0 means forever'),
  key('batch.size', 'int', '100', 'low', 'lines per poll at most'),
  key('record.min.bytes', 'int', '0', 'low', 'pads each line with a `pad` field to at least this many bytes (load tests)'),
];

function key(name, type, defaultValue, importance, documentation) {
  return { name, type, defaultValue, importance, documentation };
}

// The files this instance replays (file name -> lines): the bundled ones, or those of
// `replay.directory`, read once per instance.
let datasets = DATASETS;

// The *.ndjson files of a granted directory, each as its non-empty lines.
function readDirectoryDatasets(directory) {
  const found = {};
  for (const name of listDirectory(directory).filter((n) => n.endsWith('.ndjson'))) {
    const text = readTextFile(`${directory.replace(/\/+$/, '')}/${name}`);
    found[name] = text.split('\n').filter((line) => line.trim() !== '');
  }
  return found;
}

function settingsOf(pairs) {
  const values = Object.fromEntries(CONFIG_DEF.map((k) => [k.name, k.defaultValue]));
  for (const [k, v] of pairs) values[k] = v;
  const directory = values['replay.directory'];
  // With a directory and no files named, every file of the directory.
  const named = pairs.some(([k]) => k === 'replay.files');
  const files = directory !== '' && !named ? Object.keys(datasets).join(',') : values['replay.files'];
  return {
    raw: { ...values, 'replay.files': files },
    directory,
    topic: values['topic'],
    files: files.split(',').map((f) => f.trim()).filter((f) => f),
    rate: Number(values['replay.rate']),
    loops: Number(values['replay.loops']),
    batch: Number(values['batch.size']),
    minBytes: Number(values['record.min.bytes']),
  };
}

// Reads `replay.directory` into `datasets` when it is set; a problem (the directory
// cannot be listed or read, with the grant it needs) comes back as its text.
function loadDatasets(pairs) {
  const directory = (pairs.find(([k]) => k === 'replay.directory') ?? [])[1] ?? '';
  if (directory === '') {
    datasets = DATASETS;
    return null;
  }
  try {
    datasets = readDirectoryDatasets(directory);
    return null;
  } catch (error) {
    datasets = {};
    return error.message;
  }
}

function problemsOf(pairs) {
  const unreadable = loadDatasets(pairs);
  if (unreadable !== null) return [{ key: 'replay.directory', message: unreadable }];
  const s = settingsOf(pairs);
  const problems = [];
  for (const [name, value] of [['replay.rate', s.rate], ['replay.loops', s.loops], ['record.min.bytes', s.minBytes]]) {
    if (!Number.isInteger(value) || value < 0) problems.push({ key: name, message: 'must be a whole number, 0 or more' });
  }
  if (!Number.isInteger(s.batch) || s.batch < 1) problems.push({ key: 'batch.size', message: 'must be at least 1' });
  if (s.files.length === 0) problems.push({ key: 'replay.files', message: 'names no file' });
  for (const file of s.files) {
    if (!(file in datasets)) {
      const where = s.directory === '' ? 'bundled' : `in ${s.directory}`;
      problems.push({ key: 'replay.files', message: `no ${where} file '${file}' (${where}: ${Object.keys(datasets).join(', ')})` });
    }
  }
  return problems;
}

const partitionOf = (file) => JSON.stringify({ file });
const linesOf = (file) => datasets[file];

// The next (loop, line) to send after a committed offset text, or the start.
function nextAfter(offsetText, file) {
  if (offsetText === undefined || offsetText === null) return { loop: 0, line: 0 };
  const { loop, line } = JSON.parse(offsetText);
  return line + 1 >= linesOf(file).length ? { loop: loop + 1, line: 0 } : { loop, line: line + 1 };
}

function pastTheEnd(offsetText, file) {
  if (offsetText === undefined || offsetText === null) return false;
  return JSON.parse(offsetText).line >= linesOf(file).length;
}

const finished = (settings, next) => settings.loops > 0 && next.loop >= settings.loops;

function encodeLine(settings, text) {
  let bytes = encoder.encode(text);
  const short = settings.minBytes - bytes.length - ',"pad":""'.length;
  if (short > 0) {
    bytes = encoder.encode(`${text.slice(0, -1)},"pad":"${'.'.repeat(short)}"}`);
  }
  return bytes;
}

// One instance of the component is either the connector or one task; the host never
// calls both in one sandbox, so module-level state is this instance's state.
let connectorSettings = null;
let lastProgress = '';
let reconfigureAsked = false;

export const connector = {
  version: () => VERSION,
  configDef: () => CONFIG_DEF,
  validate: (config) => problemsOf(config),
  start(config) {
    const problems = problemsOf(config);
    if (problems.length > 0) throw { tag: 'invalid-config', val: `${problems[0].key}: ${problems[0].message}` };
    connectorSettings = settingsOf(config);
    log('info', `replaying ${connectorSettings.files.join(', ')} to ${connectorSettings.topic}`);
  },
  taskConfigs(maxTasks) {
    const s = connectorSettings;
    const committed = offsets(s.files.map(partitionOf));
    // A file whose offset is past its end stays assigned: its task reports the problem.
    const remaining = s.files.filter((file, i) => {
      const text = committed[i][1];
      return pastTheEnd(text, file) || !finished(s, nextAfter(text, file));
    });
    if (remaining.length === 0) {
      log('info', `every file is replayed ${s.loops} time(s); no tasks`);
      return [];
    }
    const count = Math.max(1, Math.min(maxTasks, remaining.length));
    const groups = Array.from({ length: count }, () => []);
    remaining.forEach((file, i) => groups[i % count].push(file));
    reconfigureAsked = false;
    return groups.map((files) => Object.entries({ ...s.raw, 'replay.files': files.join(',') }));
  },
  tick() {
    const s = connectorSettings;
    const progress = [];
    let allDone = true;
    for (const file of s.files) {
      // One partition at a time: the single-offset reader.
      const committed = offset(partitionOf(file));
      const next = nextAfter(committed, file);
      allDone = allDone && finished(s, next);
      const loops = s.loops === 0 ? 'forever' : `${s.loops}`;
      progress.push(finished(s, next)
        ? `${file}: done`
        : `${file}: loop ${next.loop + 1} of ${loops}, line ${next.line} of ${linesOf(file).length}`);
    }
    const text = progress.join('; ');
    if (text !== lastProgress) {
      lastProgress = text;
      log('info', `progress ${text}`);
    }
    if (allDone && !reconfigureAsked) {
      reconfigureAsked = true;
      log('info', 'every file is replayed; asking for a reconfiguration');
      requestTaskReconfiguration();
    }
  },
  stop() {},
};

let running = null;

export const task = {
  start(config) {
    const unreadable = loadDatasets(config);
    if (unreadable !== null) throw { tag: 'fatal', val: unreadable };
    const s = settingsOf(config);
    const committed = offsets(s.files.map(partitionOf));
    const cursors = [];
    for (let i = 0; i < s.files.length; i++) {
      const file = s.files[i];
      const text = committed[i][1];
      if (pastTheEnd(text, file)) {
        raiseError(`committed offset ${text} of ${file} is past its last line (${linesOf(file).length} lines): ` +
          'the data changed since it was committed; delete the offset to replay it again');
        return;
      }
      cursors.push({ file, partition: partitionOf(file), next: nextAfter(text, file) });
    }
    if (cursors.some((c) => c.next.loop > 0 || c.next.line > 0)) {
      log('info', `resuming ${cursors.map((c) => `${c.file} at loop ${c.next.loop + 1} line ${c.next.line}`).join(', ')}`);
    }
    running = { settings: s, cursors, turn: 0, started: Date.now(), sent: 0 };
  },
  poll() {
    const { settings: s, cursors } = running;
    let budget = s.batch;
    if (s.rate > 0) {
      const allowed = Math.floor(((Date.now() - running.started) * s.rate) / 1000);
      // Time not polled in (paused, a slow destination) is not paid back in a burst.
      running.sent = Math.max(running.sent, allowed - s.batch);
      const due = allowed - running.sent;
      budget = Math.max(0, Math.min(budget, due));
    }
    const records = [];
    let idle = 0;
    // Round-robin over the files, one line each.
    while (records.length < budget && idle < cursors.length) {
      const cursor = cursors[running.turn];
      running.turn = (running.turn + 1) % cursors.length;
      if (finished(s, cursor.next)) {
        idle += 1;
        continue;
      }
      idle = 0;
      const { loop, line } = cursor.next;
      const text = linesOf(cursor.file)[line];
      records.push({
        partition: cursor.partition,
        offset: `{"loop":${loop},"line":${line}}`,
        topic: s.topic,
        key: encoder.encode(`${cursor.file}:${line}`),
        value: encodeLine(s, text),
        headers: [{ key: 'replay.loop', value: encoder.encode(String(loop)) }],
        timestamp: undefined,
      });
      cursor.next = line + 1 >= linesOf(cursor.file).length ? { loop: loop + 1, line: 0 } : { loop, line: line + 1 };
    }
    running.sent += records.length;
    return records;
  },
  commit() {},
  stop() {},
};
