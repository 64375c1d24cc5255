"""{{name}}: a Sluice source connector in Python. Each task sends `record.count` numbered
messages to `topic` and resumes after its committed offset when restarted."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, offset_storage_reader
from wit_world.imports.types import ConfigKey, ConfigType, ConnectorError_InvalidConfig, Importance, SourceRecord

CONFIG_DEF = [
    ConfigKey("topic", ConfigType.STRING, "{{name}}", Importance.HIGH, "Destination topic."),
    ConfigKey("message", ConfigType.STRING, "hello", Importance.MEDIUM, "The text of every record."),
    ConfigKey("record.count", ConfigType.LONG, "10", Importance.MEDIUM, "Records per task; 0 is endless."),
]


def settings(config):
    values = {key.name: key.default_value for key in CONFIG_DEF}
    values.update(dict(config))
    return values


class State:
    """componentize-py makes a new Connector/Task object per call: keep state here."""

    config = []
    task = 0
    next = 0


class Connector(exports.Connector):
    def version(self):
        return "0.1.0"

    def config_def(self):
        return CONFIG_DEF

    def validate(self, config):
        return []

    def start(self, config):
        if not settings(config)["record.count"].isdigit():
            raise Err(ConnectorError_InvalidConfig("record.count: not a whole number"))
        State.config = config

    def task_configs(self, max_tasks):
        return [State.config + [("task", str(task))] for task in range(max_tasks)]

    def tick(self):
        pass

    def stop(self):
        pass


class Task(exports.Task):
    def start(self, config):
        State.config = settings(config)
        State.task = int(State.config["task"])
        # Resume after the committed offset, if there is one.
        committed = offset_storage_reader.offset(json.dumps({"task": State.task}))
        State.next = json.loads(committed)["n"] + 1 if committed else 0
        log.log(log.Level.INFO, f"task {State.task} starts at message {State.next}")

    def poll(self):
        count = int(State.config["record.count"])
        records = []
        while len(records) < 100 and (count == 0 or State.next < count):
            value = {"task": State.task, "n": State.next, "message": State.config["message"]}
            records.append(
                SourceRecord(
                    partition=json.dumps({"task": State.task}),
                    offset=json.dumps({"n": State.next}),
                    topic=State.config["topic"],
                    key=None,
                    value=json.dumps(value, separators=(",", ":")).encode(),
                    headers=[],
                    timestamp=None,
                )
            )
            State.next += 1
        return records

    def commit(self):
        pass

    def stop(self):
        pass
