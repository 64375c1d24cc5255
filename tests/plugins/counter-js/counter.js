// counter-js: the counter's logic in JavaScript, as small as a connector gets, so that
// `sluice-bench record-path` measures the host and componentize-js's bindings rather than
// a plugin's own work. One task; record `n` of partition {"counter":0} has offset
// {"seq":n} and a value of `record.size` bytes ("<n>" then dots).
//
// Targets sluice:connector@0.4.0: a batch's offsets and values are written into one
// Uint8Array and the records (13 little-endian u32s each, naming spans of it) into one
// Uint32Array, so the batch crosses as byte arrays. componentize-js lowers a returned value
// field by field in interpreted JavaScript: on 0.2.0 (a string and a byte array per
// record) the same logic ran at 45 k records/s, on 0.3.0 (one byte array, a record of
// spans per record) at 71 k (`sluice-bench languages --only counter-js`).

import { offset } from 'sluice:connector/offset-storage-reader@0.4.0';

const PARTITION = '{"counter":0}';
// The longest offset text, {"seq":<2^53>}, with room to spare.
const MAX_OFFSET_BYTES = 32;
// 0.4.0's words per record, and its flags: a topic (1) and a value (4).
const WORDS = 13;
const TOPIC_AND_VALUE = 1 | 4;
const NO_HEADERS = new Uint8Array(0);
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
    // After the committed offset: a restart, or the host recycling this instance once its
    // memory grows, goes on rather than sending everything again.
    const committed = offset(PARTITION);
    state = {
      topic: values.topic ?? 'bench',
      size: Number(values['record.size'] ?? '1024'),
      batch: Number(values['batch.size'] ?? '500'),
      next: committed === undefined ? 0 : JSON.parse(committed).seq + 1,
    };
  },
  poll() {
    const { size, batch } = state;
    const dots = encoder.encode('.'.repeat(size));
    const data = new Uint8Array(batch * (size + MAX_OFFSET_BYTES));
    // Zeroed: partition 0, topic 0, no key, no headers, no timestamp.
    const records = new Uint32Array(batch * WORDS);
    let at = 0;
    for (let i = 0; i < batch; i++) {
      const n = state.next + i;
      const offsetBytes = encoder.encodeInto(`{"seq":${n}}`, data.subarray(at)).written;
      const value = at + offsetBytes;
      // "<n>" then dots: the dots, with the digits written over their start.
      data.set(dots, value);
      encoder.encodeInto(String(n), data.subarray(value, value + size));
      const word = i * WORDS;
      records[word] = TOPIC_AND_VALUE;
      records[word + 3] = at;
      records[word + 4] = offsetBytes;
      records[word + 7] = value;
      records[word + 8] = size;
      at = value + size;
    }
    state.next += batch;
    return {
      partitions: [PARTITION],
      topics: [state.topic],
      data: data.subarray(0, at),
      headers: NO_HEADERS,
      records: new Uint8Array(records.buffer),
      done: false,
    };
  },
  commit() {},
  stop() {},
};
