// counter-js: the counter's logic in JavaScript, as small as a connector gets, so that
// `sluice-bench record-path` measures the host and componentize-js's bindings rather than
// a plugin's own work. One task; record `n` of partition {"counter":0} has offset
// {"seq":n} and a value of `record.size` bytes ("<n>" then dots).
//
// Targets sluice:connector@0.3.0: a batch's offsets and values are written into one
// Uint8Array and each record names its parts as spans of it. componentize-js lowers a
// returned value field by field in interpreted JavaScript, so one byte array per batch
// instead of a string and a byte array per record is about 1.6x the records/s of the
// same logic on 0.2.0 (`sluice-bench languages --only counter-js`: 71 k against 45 k).

const PARTITION = '{"counter":0}';
// The longest offset text, {"seq":<2^53>}, with room to spare.
const MAX_OFFSET_BYTES = 32;
const NO_HEADERS = { start: 0, len: 0 };
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
    const { size, batch } = state;
    const dots = encoder.encode('.'.repeat(size));
    const data = new Uint8Array(batch * (size + MAX_OFFSET_BYTES));
    const records = new Array(batch);
    let at = 0;
    for (let i = 0; i < batch; i++) {
      const n = state.next + i;
      const offsetBytes = encoder.encodeInto(`{"seq":${n}}`, data.subarray(at)).written;
      const value = at + offsetBytes;
      // "<n>" then dots: the dots, with the digits written over their start.
      data.set(dots, value);
      encoder.encodeInto(String(n), data.subarray(value, value + size));
      records[i] = {
        partition: 0,
        offset: { start: at, len: offsetBytes },
        topic: 0,
        key: undefined,
        value: { start: value, len: size },
        headers: NO_HEADERS,
        timestamp: undefined,
      };
      at = value + size;
    }
    state.next += batch;
    return { partitions: [PARTITION], topics: [state.topic], data: data.subarray(0, at), headers: [], records, done: false };
  },
  commit() {},
  stop() {},
};
