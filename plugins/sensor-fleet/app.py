"""sensor-fleet: a simulated fleet of sensors, written in Python (componentize-py).

Every sensor emits a deterministic series of readings: reading `seq` of `sensor-0003` is
the same on every run, so a restarted connector that resumes from its committed offset
produces exactly the records an uninterrupted one would have.

- Partition `{"sensor": "sensor-0003"}`, offset `{"seq": n}` (the last reading delivered).
- `tasks.max` splits the fleet: task i gets every sensor whose number is i modulo the
  task count, among the sensors that still have readings to send.
- The connector's `tick` reads the committed offsets and logs how far behind each task
  is; it asks for a reconfiguration once a task has nothing left to send, and fails the
  connector if an offset is past `readings.per.sensor` (the limit was lowered).

The host builds this file with `componentize-py -d wit -w source-connector componentize app`.
"""

import json
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import connector_context, log, offset_storage_reader
from wit_world.imports.types import (
    ConfigKey,
    ConfigProblem,
    ConfigType,
    ConnectorError_Fatal,
    ConnectorError_InvalidConfig,
    Importance,
    SourceRecord,
)

VERSION = "0.1.0"
# Simulated time of reading 0; a sensor reads once per `reading.interval.ms` after it.
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MASK = (1 << 64) - 1

CONFIG_DEF = [
    ConfigKey("topic", ConfigType.STRING, "sensors", Importance.HIGH, "topic the readings go to"),
    ConfigKey("fleet.size", ConfigType.INT, "8", Importance.HIGH, "number of sensors, sensor-0000 onwards"),
    ConfigKey(
        "readings.per.sensor", ConfigType.LONG, "0", Importance.MEDIUM,
        "readings each sensor sends before it is done; 0 means endless",
    ),
    ConfigKey("seed", ConfigType.LONG, "1", Importance.LOW, "seed of the simulated values"),
    ConfigKey("batch.size", ConfigType.INT, "100", Importance.LOW, "readings per poll at most"),
    ConfigKey(
        "readings.per.second", ConfigType.INT, "0", Importance.LOW,
        "readings per second per task at most; 0 means as fast as polled",
    ),
    ConfigKey("reading.interval.ms", ConfigType.LONG, "1000", Importance.LOW, "simulated time between readings"),
    ConfigKey(
        "record.min.bytes", ConfigType.INT, "0", Importance.LOW,
        "pads each reading with a `pad` field to at least this many bytes (load tests)",
    ),
]
DEFAULTS = {key.name: key.default_value for key in CONFIG_DEF}
INT_KEYS = [key.name for key in CONFIG_DEF if key.type in (ConfigType.INT, ConfigType.LONG)]


class Settings:
    def __init__(self, pairs):
        values = dict(DEFAULTS)
        values.update(dict(pairs))
        self.raw = values
        self.topic = values["topic"]
        self.fleet_size = int(values["fleet.size"])
        self.readings = int(values["readings.per.sensor"])
        self.seed = int(values["seed"])
        self.batch = int(values["batch.size"])
        self.rate = int(values["readings.per.second"])
        self.interval = int(values["reading.interval.ms"])
        self.min_bytes = int(values["record.min.bytes"])

    def done(self, next_seq):
        return self.readings > 0 and next_seq >= self.readings


def problems(pairs):
    values = dict(DEFAULTS)
    values.update(dict(pairs))
    found = []
    for key in INT_KEYS:
        try:
            int(values[key])
        except ValueError:
            found.append(ConfigProblem(key, f"not an integer: {values[key]!r}"))
    if found:
        return found
    if int(values["fleet.size"]) < 1:
        found.append(ConfigProblem("fleet.size", "must be at least 1"))
    if int(values["batch.size"]) < 1:
        found.append(ConfigProblem("batch.size", "must be at least 1"))
    for key in ("readings.per.sensor", "readings.per.second", "record.min.bytes"):
        if int(values[key]) < 0:
            found.append(ConfigProblem(key, "must not be negative"))
    return found


def sensor_name(number):
    return f"sensor-{number:04d}"


def partition_of(sensor):
    return json.dumps({"sensor": sensor}, separators=(",", ":"))


def committed_next(offset_text):
    """The next reading to send, given a committed offset (or None)."""
    if offset_text is None:
        return 0
    return int(json.loads(offset_text)["seq"]) + 1


def mix(value):
    """splitmix64's finalizer: the same 64-bit hash in every language."""
    value = (value + 0x9E3779B97F4A7C15) & MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK
    return value ^ (value >> 31)


def reading(settings, number, seq):
    """Reading `seq` of sensor `number`, as a dict (deterministic in seed, sensor, seq)."""
    h = mix(mix(mix(settings.seed & MASK) ^ number) ^ seq)
    return {
        "sensor": sensor_name(number),
        "seq": seq,
        "ts": EPOCH_MS + seq * settings.interval,
        "temperature_cc": 1500 + h % 1500,  # centi-degrees Celsius, 15.00 to 29.99
        "humidity_pm": 300 + (h >> 16) % 500,  # per mille
        "battery_pm": 1000 - min(seq // 100, 1000),
    }


def encode(settings, value):
    text = json.dumps(value, separators=(",", ":"))
    short = settings.min_bytes - len(text) - len(',"pad":""')
    if short > 0:
        # Appended as text: the same JSON as dumping again with a last "pad" key.
        text = f'{text[:-1]},"pad":"{"." * short}"}}'
    return text.encode()


def assign(sensors, max_tasks):
    """Sensors split across at most `max_tasks` tasks, by number modulo the task count."""
    count = min(max_tasks, len(sensors))
    return [[s for i, s in enumerate(sensors) if i % count == t] for t in range(count)]


class ConnectorState:
    settings = None
    assignment = []
    last_report = None


class TaskState:
    settings = None
    sensors = []
    next = {}
    cursor = 0
    started = 0.0
    sent = 0

    def allowance(self):
        settings = self.settings
        if settings.rate == 0:
            return settings.batch
        allowed = int((time.monotonic() - self.started) * settings.rate)
        # Time not polled in (paused, a slow destination) is not paid back in a burst.
        self.sent = max(self.sent, allowed - settings.batch)
        due = allowed - self.sent
        return max(0, min(settings.batch, due))


# componentize-py makes a new `Connector` / `Task` object for every call, so the state
# of this instance (this sandbox) lives at module level.
CONNECTOR = ConnectorState()
TASK = TaskState()


class Connector(exports.Connector):
    def version(self):
        return VERSION

    def config_def(self):
        return CONFIG_DEF

    def validate(self, config):
        return problems(config)

    def start(self, config):
        found = problems(config)
        if found:
            raise Err(ConnectorError_InvalidConfig(f"{found[0].key}: {found[0].message}"))
        CONNECTOR.settings = Settings(config)
        log.log(log.Level.INFO, f"fleet of {CONNECTOR.settings.fleet_size} sensors, topic {CONNECTOR.settings.topic}")

    def task_configs(self, max_tasks):
        settings = CONNECTOR.settings
        sensors = list(range(settings.fleet_size))
        partitions = [partition_of(sensor_name(n)) for n in sensors]
        # Batch lookup: which sensors still have readings to send.
        committed = offset_storage_reader.offsets(partitions)
        remaining = [n for n, (_, offset) in zip(sensors, committed) if not settings.done(committed_next(offset))]
        CONNECTOR.assignment = assign(remaining, max(max_tasks, 1))
        if not remaining:
            log.log(log.Level.INFO, f"all {settings.fleet_size} sensors have sent their readings; no tasks")
        base = [(k, v) for k, v in settings.raw.items()]
        return [base + [("sensors", ",".join(str(n) for n in group))] for group in CONNECTOR.assignment]

    def tick(self):
        settings = CONNECTOR.settings
        # One lookup per sensor: the single-partition reader.
        nexts = {}
        for n in range(settings.fleet_size):
            next_seq = committed_next(offset_storage_reader.offset(partition_of(sensor_name(n))))
            if settings.readings > 0 and next_seq > settings.readings:
                connector_context.raise_error(
                    f"{sensor_name(n)} has {next_seq} readings committed, more than "
                    f"readings.per.sensor={settings.readings}: the limit was lowered after "
                    f"they were sent; use a new connector name to start over"
                )
                return
            nexts[n] = next_seq
        # How far behind each task is: against its target when the fleet is bounded,
        # against the sensor furthest ahead when it is endless.
        lead = settings.readings if settings.readings > 0 else max(nexts.values())
        report = []
        for index, group in enumerate(CONNECTOR.assignment):
            sent = sum(nexts[n] for n in group)
            report.append((index, sent, lead * len(group) - sent))
        if report != CONNECTOR.last_report:
            CONNECTOR.last_report = report
            for index, sent, behind in report:
                log.log(log.Level.INFO, f"lag task {index}: {sent} readings committed, {behind} behind")
        if settings.readings > 0 and any(behind == 0 for _, _, behind in report):
            log.log(log.Level.INFO, "a task has sent all its readings; asking for a reconfiguration")
            connector_context.request_task_reconfiguration()

    def stop(self):
        pass


class Task(exports.Task):

    def start(self, config):
        TASK.settings = Settings(config)
        numbers = [int(n) for n in dict(config).get("sensors", "").split(",") if n]
        if not numbers:
            raise Err(ConnectorError_Fatal("task config has no sensors"))
        committed = offset_storage_reader.offsets([partition_of(sensor_name(n)) for n in numbers])
        TASK.sensors = numbers
        TASK.next = {n: committed_next(offset) for n, (_, offset) in zip(numbers, committed)}
        resumed = {sensor_name(n): s for n, s in TASK.next.items() if s > 0}
        if resumed:
            log.log(log.Level.INFO, f"resuming {len(resumed)} sensors from their committed offsets")
        TASK.started = time.monotonic()

    def poll(self):
        settings = TASK.settings
        budget = TASK.allowance()
        records = []
        idle = 0
        # Round-robin over the sensors, one reading each, like a fleet reporting in turn.
        while len(records) < budget and idle < len(TASK.sensors):
            n = TASK.sensors[TASK.cursor]
            TASK.cursor = (TASK.cursor + 1) % len(TASK.sensors)
            seq = TASK.next[n]
            if settings.done(seq):
                idle += 1
                continue
            idle = 0
            value = reading(settings, n, seq)
            records.append(
                SourceRecord(
                    partition=partition_of(sensor_name(n)),
                    offset=f'{{"seq":{seq}}}',
                    topic=settings.topic,
                    key=sensor_name(n).encode(),
                    value=encode(settings, value),
                    headers=[],
                    timestamp=value["ts"],
                )
            )
            TASK.next[n] = seq + 1
        TASK.sent += len(records)
        return records

    def commit(self):
        pass

    def stop(self):
        pass
