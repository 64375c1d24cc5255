// {{name}}: a Sluice source connector in JavaScript. It reads `streams` (here, made-up
// sequences of numbered messages; in your connector, files, tables, symbols...), shares
// them among its tasks, and sends `record.count` messages per stream to `topic`.
//
// Each record's source partition names the stream it comes from, never the task that read
// it: when `tasks.max` changes, streams move between tasks and each new owner resumes after
// that stream's committed offset, so nothing is sent twice or skipped. A task whose
// streams have all sent `record.count` messages says it is done (`sluice run --until-done`
// exits once every task is).
//
// It targets sluice:connector@0.2.0 (wit/connector.wit) with the WASI filesystem added
// (wit/files.wit), which `files.js` uses to read `message.file`.

import { offsets } from 'sluice:connector/offset-storage-reader@0.2.0';
import { log } from 'sluice:connector/log@0.2.0';
import { readTextFile } from './files.js';

const CONFIG_DEF = [
  { name: 'topic', type: 'string', defaultValue: '{{name}}', importance: 'high', documentation: 'Destination topic.' },
  { name: 'streams', type: 'list', defaultValue: 'north,south,east,west', importance: 'high', documentation: 'The sources to read.' },
  { name: 'message', type: 'string', defaultValue: 'hello', importance: 'medium', documentation: 'The text of every record.' },
  { name: 'record.count', type: 'long', defaultValue: '10', importance: 'medium', documentation: 'Records per stream; 0 is endless.' },
  { name: 'message.file', type: 'string', defaultValue: '', importance: 'low', documentation: 'A file whose text is the message instead (its directory must be in sandbox.fs.read).' },
];

function settings(config) {
  const values = Object.fromEntries(CONFIG_DEF.map((key) => [key.name, key.defaultValue]));
  for (const [key, value] of config) values[key] = value;
  return values;
}

// The stream names, each once: a name given twice would go to two tasks, and both would
// send its records.
const streamsOf = (values) => [...new Set(values.streams.split(',').map((s) => s.trim()).filter((s) => s !== ''))];
// Source partition: the stream a record comes from, {"stream":"north"}.
const partition = (stream) => JSON.stringify({ stream });

// One sandbox is either the connector or one task: module state is this instance's.
let connectorConfig = [];
let state = null;
const encoder = new TextEncoder();

export const connector = {
  version: () => '0.1.0',
  configDef: () => CONFIG_DEF,
  validate: () => [],
  start(config) {
    const values = settings(config);
    if (!/^\d+$/.test(values['record.count'])) {
      throw { tag: 'invalid-config', val: 'record.count: not a whole number' };
    }
    if (streamsOf(values).length === 0) throw { tag: 'invalid-config', val: 'streams: name at least one' };
    connectorConfig = config;
  },
  // Stream i goes to task i mod n: at most one task per stream.
  taskConfigs(maxTasks) {
    const names = streamsOf(settings(connectorConfig));
    const tasks = Math.min(names.length, Math.max(maxTasks, 1));
    const others = connectorConfig.filter(([key]) => key !== 'streams');
    return Array.from({ length: tasks }, (_, task) => [
      ...others,
      ['streams', names.filter((_, i) => i % tasks === task).join(',')],
    ]);
  },
  tick() {},
  stop() {},
};

export const task = {
  start(config) {
    const values = settings(config);
    if (values['message.file'] !== '') {
      // A file that cannot be read fails the task with the reason (and the grant to add).
      try {
        values.message = readTextFile(values['message.file']).trim();
      } catch (error) {
        throw { tag: 'fatal', val: error.message };
      }
    }
    const names = streamsOf(values);
    // Every stream this task now owns resumes after its committed offset (one call).
    const committed = offsets(names.map(partition));
    const next = new Map();
    names.forEach((name, i) => {
      const offset = committed[i][1];
      next.set(name, offset === undefined ? 0 : JSON.parse(offset).n + 1);
      log('info', `stream ${name} starts at message ${next.get(name)}`);
    });
    // A batch names each partition and topic once; records refer to them by index.
    state = { values, next, count: Number(values['record.count']), partitions: names.map(partition) };
  },
  // Up to 100 records, taken in turn from the streams that have more. No records (and not
  // done) means nothing to send now: the host calls again after a short pause (up to 1 s).
  poll() {
    const records = [];
    const streams = [...state.next.keys()];
    const more = (name) => state.count === 0 || state.next.get(name) < state.count;
    while (records.length < 100 && streams.some(more)) {
      streams.forEach((name, index) => {
        if (!more(name)) return;
        const n = state.next.get(name);
        const value = JSON.stringify({ stream: name, n, message: state.values.message });
        records.push({
          partition: index,
          offset: JSON.stringify({ n }),
          topic: 0,
          key: undefined,
          value: encoder.encode(value),
          headers: [],
          timestamp: undefined,
        });
        state.next.set(name, n + 1);
      });
    }
    const done = !streams.some(more);
    return { partitions: state.partitions, topics: [state.values.topic], records, done };
  },
  commit() {},
  stop() {},
};
