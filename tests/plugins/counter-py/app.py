"""counter-py: the counter's logic in Python, as small as a connector gets, so that
`sluice-bench record-path` measures the host and componentize-py's bindings rather than a
plugin's own work. One task; record `n` of partition {"counter":0} has offset {"seq":n}
and a value of `record.size` bytes ("<n>" then dots).

Targets sluice:connector@0.2.0: componentize-py lowers a returned value field by field
(an attribute lookup and a GIL acquire each), so 0.3.0's spans (three more records per
record) were slower here (`sluice-bench languages --only counter-py`: 112 k records/s
against 153 k). The loop does as little per record as it can: one str, its bytes padded
to size, one record."""

from wit_world import exports
from wit_world.imports.types import BatchRecord, ConfigKey, ConfigType, Importance, PollBatch

PARTITION = '{"counter":0}'


class State:
    config = []
    topic = "bench"
    size = 1024
    batch = 500
    next = 0


class Connector(exports.Connector):
    def version(self):
        return "0.1.0"

    def config_def(self):
        return [
            ConfigKey("topic", ConfigType.STRING, "bench", Importance.HIGH, "Destination topic."),
            ConfigKey("record.size", ConfigType.INT, "1024", Importance.MEDIUM, "Bytes per value."),
            ConfigKey("batch.size", ConfigType.INT, "500", Importance.MEDIUM, "Records per poll."),
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
        State.next = 0

    def poll(self):
        first, size = State.next, State.size
        State.next += State.batch
        record, no_headers = BatchRecord, []
        records = []
        for n in range(first, State.next):
            digits = str(n)
            value = digits.encode().ljust(size, b".")
            records.append(record(0, '{"seq":' + digits + "}", 0, None, value, no_headers, None))
        return PollBatch([PARTITION], [State.topic], records, False)

    def commit(self):
        pass

    def stop(self):
        pass
