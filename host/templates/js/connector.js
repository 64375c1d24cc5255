// {{name}}: a Sluice source connector in JavaScript. It reads `streams` (here, made-up
// sequences of numbered messages; in your connector, files, tables, symbols...), shares
// them among its tasks, and sends `record.count` messages per stream to `topic`.
//
// Each record's source partition names the stream it comes from, never the task that read
// it: when `tasks.max` changes, streams move between tasks and each new owner resumes after
// that stream's committed offset, so nothing is sent twice or skipped.

import { offsets } from 'sluice:connector/offset-storage-reader@0.1.0';
import { log } from 'sluice:connector/log@0.1.0';

const CONFIG_DEF = [
  { name: 'topic', type: 'string', defaultValue: '{{name}}', importance: 'high', documentation: 'Destination topic.' },
  { name: 'streams', type: 'list', defaultValue: 'north,south,east,west', importance: 'high', documentation: 'The sources to read.' },
  { name: 'message', type: 'string', defaultValue: 'hello', importance: 'medium', documentation: 'The text of every record.' },
  { name: 'record.count', type: 'long', defaultValue: '10', importance: 'medium', documentation: 'Records per stream; 0 is endless.' },
];

function settings(config) {
  const values = Object.fromEntries(CONFIG_DEF.map((key) => [key.name, key.defaultValue]));
  for (const [key, value] of config) values[key] = value;
  return values;
}

const streamsOf = (values) => values.streams.split(',').map((s) => s.trim()).filter((s) => s !== '');
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
    const names = streamsOf(values);
    // Every stream this task now owns resumes after its committed offset (one call).
    const committed = offsets(names.map(partition));
    const next = new Map();
    names.forEach((name, i) => {
      const offset = committed[i][1];
      next.set(name, offset === undefined ? 0 : JSON.parse(offset).n + 1);
      log('info', `stream ${name} starts at message ${next.get(name)}`);
    });
    state = { values, next, count: Number(values['record.count']) };
  },
  // Up to 100 records, taken in turn from the streams that have more. An empty list means
  // nothing to send now: the host calls again after a short pause (up to 1 s).
  poll() {
    const records = [];
    while (records.length < 100) {
      const before = records.length;
      for (const [name, n] of state.next) {
        if (state.count !== 0 && n >= state.count) continue;
        const value = JSON.stringify({ stream: name, n, message: state.values.message });
        records.push({
          partition: partition(name),
          offset: JSON.stringify({ n }),
          topic: state.values.topic,
          key: undefined,
          value: encoder.encode(value),
          headers: [],
          timestamp: undefined,
        });
        state.next.set(name, n + 1);
      }
      if (records.length === before) break;
    }
    return records;
  },
  commit() {},
  stop() {},
};
