"""counter-py: the counter's logic in Python, as small as a connector gets, so that
`sluice-bench record-path` measures the host and componentize-py's bindings rather than a
plugin's own work. One task; record `n` of partition {"counter":0} has offset {"seq":n}
and a value of `record.size` bytes ("<n>" then dots).

Targets sluice:connector@0.4.0: a batch is three byte strings (the records' bytes, their
headers and the records themselves, 13 little-endian u32s each), which componentize-py
lowers with one copy each. It lowers a list of records field by field instead (an
attribute lookup by a name made anew, and a GIL acquire, per field), which was most of a
record's time on 0.2.0 and more on 0.3.0 (`sluice-bench languages --only counter-py`:
153 k records/s on 0.2.0, 112 k on 0.3.0). Per record the loop makes the offset's and
the value's bytes and extends the index by one tuple."""

import json
from array import array

from wit_world import exports
from wit_world.imports import offset_storage_reader
from wit_world.imports.types import ConfigKey, ConfigType, Importance, PollBatch

PARTITION = '{"counter":0}'
# A record's flags (word 0 of its 13): it has a topic (1) and a value (4).
TOPIC_AND_VALUE = 1 | 4


class State:
    config = []
    topic = "bench"
    size = 1024
    batch = 500
    next = 0
    # Test only: "flags", "length" or "span" breaks the first batch's layout that way.
    corrupt = ""


class Connector(exports.Connector):
    def version(self):
        return "0.1.0"

    def config_def(self):
        return [
            ConfigKey("topic", ConfigType.STRING, "bench", Importance.HIGH, "Destination topic."),
            ConfigKey("record.size", ConfigType.INT, "1024", Importance.MEDIUM, "Bytes per value."),
            ConfigKey("batch.size", ConfigType.INT, "500", Importance.MEDIUM, "Records per poll."),
            ConfigKey("corrupt", ConfigType.STRING, "", Importance.LOW, "Test only: break the first batch."),
        ]

    def validate(self, config):
        return []

    def start(self, config):
        State.config = config

    def task_configs(self, max_tasks):
        return [State.config]

    def tick(self):
        pass

    def stop(self):
        pass


class Task(exports.Task):
    def start(self, config):
        values = dict(config)
        State.topic = values.get("topic", "bench")
        State.size = int(values.get("record.size", "1024"))
        State.batch = int(values.get("batch.size", "500"))
        # After the committed offset: a restart, or the host recycling this instance once
        # its memory grows, goes on rather than sending everything again.
        offset = offset_storage_reader.offset(PARTITION)
        State.next = json.loads(offset)["seq"] + 1 if offset else 0
        State.corrupt = values.get("corrupt", "")

    def poll(self):
        first, size = State.next, State.size
        State.next += State.batch
        parts, index, at = [], [], 0
        for n in range(first, State.next):
            offset = b'{"seq":%d}' % n
            value = (b"%d" % n).ljust(size, b".")
            length, value_length = len(offset), len(value)
            # flags, partition 0, topic 0, the offset's span, no key, the value's span, no
            # headers, no timestamp. WebAssembly is little-endian, as 0.4.0's words are.
            index += (TOPIC_AND_VALUE, 0, 0, at, length, 0, 0, at + length, value_length, 0, 0, 0, 0)
            parts += (offset, value)
            at += length + value_length
        if State.corrupt and first == 0:
            if State.corrupt == "flags":
                index[3 * 13] |= 0x10
            elif State.corrupt == "span":
                index[3 * 13 + 7] = at
        records = array("I", index).tobytes()
        if State.corrupt == "length" and first == 0:
            records = records[:-1]
        return PollBatch([PARTITION], [State.topic], b"".join(parts), b"", records, False)

    def commit(self):
        pass

    def stop(self):
        pass
