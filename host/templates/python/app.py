"""{{name}}: a Sluice source connector in Python. It reads `streams` (here, made-up
sequences of numbered messages; in your connector, files, tables, symbols...), shares
them among its tasks, and sends `record.count` messages per stream to `topic`.

Each record's source partition names the stream it comes from, never the task that read
it: when `tasks.max` changes, streams move between tasks and each new owner resumes after
that stream's committed offset, so nothing is sent twice or skipped. A task whose
streams have all sent `record.count` messages says it is done (`sluice run --until-done`
exits once every task is).

It targets sluice:connector@0.2.0 (wit/connector.wit)."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, offset_storage_reader
from wit_world.imports.types import (
    BatchRecord,
    ConfigKey,
    ConfigType,
    ConnectorError_Fatal,
    ConnectorError_InvalidConfig,
    Importance,
    PollBatch,
)

CONFIG_DEF = [
    ConfigKey("topic", ConfigType.STRING, "{{name}}", Importance.HIGH, "Destination topic."),
    ConfigKey("streams", ConfigType.LIST, "north,south,east,west", Importance.HIGH, "The sources to read."),
    ConfigKey("message", ConfigType.STRING, "hello", Importance.MEDIUM, "The text of every record."),
    ConfigKey("record.count", ConfigType.LONG, "10", Importance.MEDIUM, "Records per stream; 0 is endless."),
    ConfigKey(
        "message.file",
        ConfigType.STRING,
        "",
        Importance.LOW,
        "A file whose text is the message instead (its directory must be in sandbox.fs.read).",
    ),
]


def read_text_file(path):
    """The text of a file in a directory the connector config grants (`sandbox.fs.read`).
    The sandbox sees nothing else: a file outside every grant looks missing."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as error:
        hint = ""
        if isinstance(error, (FileNotFoundError, PermissionError)):
            hint = "; if it exists, add its directory to sandbox.fs.read (the sandbox sees only granted directories)"
        raise Err(ConnectorError_Fatal(f"cannot read {path}: {error.strerror}{hint}"))


def settings(config):
    values = {key.name: key.default_value for key in CONFIG_DEF}
    values.update(dict(config))
    return values


def streams(values):
    """The stream names, each once: a name given twice would go to two tasks, and both
    would send its records."""
    names = [name.strip() for name in values["streams"].split(",") if name.strip()]
    return list(dict.fromkeys(names))


def partition(stream):
    """Source partition: the stream a record comes from, {"stream": "north"}."""
    return json.dumps({"stream": stream}, separators=(",", ":"))


class State:
    """componentize-py makes a new Connector/Task object per call: keep state here."""

    config = []
    values = {}
    next = {}  # stream -> the next message number
    partitions = []  # the task's streams' partitions, which a batch names once


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
        if State.values["message.file"]:
            State.values["message"] = read_text_file(State.values["message.file"]).strip()
        names = streams(State.values)
        State.partitions = [partition(name) for name in names]
        # Every stream this task now owns resumes after its committed offset (one call).
        committed = offset_storage_reader.offsets([partition(name) for name in names])
        State.next = {}
        for name, (_, offset) in zip(names, committed):
            State.next[name] = json.loads(offset)["n"] + 1 if offset else 0
            log.log(log.Level.INFO, f"stream {name} starts at message {State.next[name]}")

    def poll(self):
        """Up to 100 records, taken in turn from the streams that have more. A batch names
        each partition and topic once; its records refer to them by index. No records (and
        not done) means nothing to send now: the host calls again after a short pause (up
        to 1 s)."""
        count = int(State.values["record.count"])
        names = list(State.next)

        def more(name):
            return count == 0 or State.next[name] < count

        records = []
        while len(records) < 100 and any(more(name) for name in names):
            for index, name in enumerate(names):
                if not more(name):
                    continue
                n = State.next[name]
                value = {"stream": name, "n": n, "message": State.values["message"]}
                records.append(
                    BatchRecord(
                        partition=index,
                        offset=json.dumps({"n": n}),
                        topic=0,
                        key=None,
                        value=json.dumps(value, separators=(",", ":")).encode(),
                        headers=[],
                        timestamp=None,
                    )
                )
                State.next[name] = n + 1
        done = not any(more(name) for name in names)
        return PollBatch(partitions=State.partitions, topics=[State.values["topic"]], records=records, done=done)

    def commit(self):
        pass

    def stop(self):
        pass
