// counter-js: the counter's logic in JavaScript, as small as a connector gets, so that
// `sluice-bench record-path` measures the host and componentize-js's bindings rather than
// a plugin's own work. One task; record `n` of partition {"counter":0} has offset
// {"seq":n} and a value of `record.size` bytes ("<n>" then dots). Targets
// sluice:connector@0.2.0.

const PARTITION = '{"counter":0}';
const encoder = new TextEncoder();
let config = [];
let state = { topic: 'bench', size: 1024, batch: 500, next: 0 };

export const connector = {
  version: () => '0.1.0',
  configDef: () => [
    { name: 'topic', type: 'string', defaultValue: 'bench', importance: 'high', documentation: 'Destination topic.' },
    { name: 'record.size', type: 'int', defaultValue: '1024', importance: 'medium', documentation: 'Bytes per value.' },
    { name: 'batch.size', type: 'int', defaultValue: '500', importance: 'medium', documentation: 'Records per poll.' },
  ],
  validate: () => [],
  start(c) { config = c; },
  taskConfigs: () => [config],
  tick() {},
  stop() {},
};

export const task = {
  start(c) {
    const values = Object.fromEntries(c);
    state = {
      topic: values.topic ?? 'bench',
      size: Number(values['record.size'] ?? '1024'),
      batch: Number(values['batch.size'] ?? '500'),
      next: 0,
    };
  },
  poll() {
    const records = new Array(state.batch);
    // Every value is "<n>" then dots: a copy of the dots with the digits written over.
    const dots = encoder.encode('.'.repeat(state.size));
    for (let i = 0; i < state.batch; i++) {
      const n = state.next + i;
      const value = dots.slice();
      value.set(encoder.encode(String(n)).subarray(0, state.size));
      records[i] = {
        partition: 0,
        offset: `{"seq":${n}}`,
        topic: 0,
        key: undefined,
        value,
        headers: [],
        timestamp: undefined,
      };
    }
    state.next += state.batch;
    return { partitions: [PARTITION], topics: [state.topic], records, done: false };
  },
  commit() {},
  stop() {},
};
