"""{{name}}: a Sluice source connector in Python. It reads `streams` (here, made-up
sequences of numbered messages; in your connector, files, tables, symbols...), shares
them among its tasks, and sends `record.count` messages per stream to `topic`.

Each record's source partition names the stream it comes from, never the task that read
it: when `tasks.max` changes, streams move between tasks and each new owner resumes after
that stream's committed offset, so nothing is sent twice or skipped."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, offset_storage_reader
from wit_world.imports.types import ConfigKey, ConfigType, ConnectorError_InvalidConfig, Importance, SourceRecord

CONFIG_DEF = [
    ConfigKey("topic", ConfigType.STRING, "{{name}}", Importance.HIGH, "Destination topic."),
    ConfigKey("streams", ConfigType.LIST, "north,south,east,west", Importance.HIGH, "The sources to read."),
    ConfigKey("message", ConfigType.STRING, "hello", Importance.MEDIUM, "The text of every record."),
    ConfigKey("record.count", ConfigType.LONG, "10", Importance.MEDIUM, "Records per stream; 0 is endless."),
]


def settings(config):
    values = {key.name: key.default_value for key in CONFIG_DEF}
    values.update(dict(config))
    return values


def streams(values):
    return [name.strip() for name in values["streams"].split(",") if name.strip()]


def partition(stream):
    """Source partition: the stream a record comes from, {"stream": "north"}."""
    return json.dumps({"stream": stream}, separators=(",", ":"))


class State:
    """componentize-py makes a new Connector/Task object per call: keep state here."""

    config = []
    values = {}
    next = {}  # stream -> the next message number


class Connector(exports.Connector):
    def version(self):
        return "0.1.0"

    def config_def(self):
        return CONFIG_DEF

    def validate(self, config):
        return []

    def start(self, config):
        values = settings(config)
        if not values["record.count"].isdigit():
            raise Err(ConnectorError_InvalidConfig("record.count: not a whole number"))
        if not streams(values):
            raise Err(ConnectorError_InvalidConfig("streams: name at least one"))
        State.config = config

    def task_configs(self, max_tasks):
        # Stream i goes to task i mod n: at most one task per stream.
        names = streams(settings(State.config))
        tasks = min(len(names), max(max_tasks, 1))
        others = [(key, value) for key, value in State.config if key != "streams"]
        return [others + [("streams", ",".join(names[task::tasks]))] for task in range(tasks)]

    def tick(self):
        pass

    def stop(self):
        pass


class Task(exports.Task):
    def start(self, config):
        State.values = settings(config)
        names = streams(State.values)
        # Every stream this task now owns resumes after its committed offset (one call).
        committed = offset_storage_reader.offsets([partition(name) for name in names])
        State.next = {}
        for name, (_, offset) in zip(names, committed):
            State.next[name] = json.loads(offset)["n"] + 1 if offset else 0
            log.log(log.Level.INFO, f"stream {name} starts at message {State.next[name]}")

    def poll(self):
        """Up to 100 records, taken in turn from the streams that have more. An empty list
        means nothing to send now: the host calls again after a short pause (up to 1 s)."""
        count = int(State.values["record.count"])
        records = []
        while len(records) < 100:
            before = len(records)
            for name, n in State.next.items():
                if count and n >= count:
                    continue
                value = {"stream": name, "n": n, "message": State.values["message"]}
                records.append(
                    SourceRecord(
                        partition=partition(name),
                        offset=json.dumps({"n": n}),
                        topic=State.values["topic"],
                        key=None,
                        value=json.dumps(value, separators=(",", ":")).encode(),
                        headers=[],
                        timestamp=None,
                    )
                )
                State.next[name] = n + 1
            if len(records) == before:
                break
        return records

    def commit(self):
        pass

    def stop(self):
        pass
