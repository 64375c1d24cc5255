// {{name}}: a Sluice source connector in JavaScript. Each task sends `record.count`
// numbered messages to `topic` and resumes after its committed offset when restarted.

import { offset } from 'sluice:connector/offset-storage-reader@0.1.0';
import { log } from 'sluice:connector/log@0.1.0';

const CONFIG_DEF = [
  { name: 'topic', type: 'string', defaultValue: '{{name}}', importance: 'high', documentation: 'Destination topic.' },
  { name: 'message', type: 'string', defaultValue: 'hello', importance: 'medium', documentation: 'The text of every record.' },
  { name: 'record.count', type: 'long', defaultValue: '10', importance: 'medium', documentation: 'Records per task; 0 is endless.' },
];

function settings(config) {
  const values = Object.fromEntries(CONFIG_DEF.map((key) => [key.name, key.defaultValue]));
  for (const [key, value] of config) values[key] = value;
  return values;
}

// One sandbox is either the connector or one task: module state is this instance's.
let connectorConfig = [];
let state = null;
const encoder = new TextEncoder();

export const connector = {
  version: () => '0.1.0',
  configDef: () => CONFIG_DEF,
  validate: () => [],
  start(config) {
    if (!/^\d+$/.test(settings(config)['record.count'])) {
      throw { tag: 'invalid-config', val: 'record.count: not a whole number' };
    }
    connectorConfig = config;
  },
  taskConfigs: (maxTasks) => Array.from({ length: maxTasks }, (_, task) => [...connectorConfig, ['task', String(task)]]),
  tick() {},
  stop() {},
};

export const task = {
  start(config) {
    const values = settings(config);
    const id = Number(values.task);
    // Resume after the committed offset, if there is one.
    const committed = offset(JSON.stringify({ task: id }));
    const next = committed === undefined ? 0 : JSON.parse(committed).n + 1;
    log('info', `task ${id} starts at message ${next}`);
    state = { values, id, next, count: Number(values['record.count']) };
  },
  poll() {
    const records = [];
    while (records.length < 100 && (state.count === 0 || state.next < state.count)) {
      const value = JSON.stringify({ task: state.id, n: state.next, message: state.values.message });
      records.push({
        partition: JSON.stringify({ task: state.id }),
        offset: JSON.stringify({ n: state.next }),
        topic: state.values.topic,
        key: undefined,
        value: encoder.encode(value),
        headers: [],
        timestamp: undefined,
      });
      state.next += 1;
    }
    return records;
  },
  commit() {},
  stop() {},
};
