"""The events topic's record format and the pipeline's validation rules.

Record: key = user_id (UTF-8), value = one JSON object:

    {"event_id": "e-000042", "user_id": "u-07", "event_type": "purchase",
     "amount": 12.34, "event_time": "2024-05-01T12:00:03.123Z"}

    event_type  one of EVENT_TYPES
    amount      a JSON number >= 0 with at most two decimals (money; summed exactly as decimal(12,2))
    event_time  ISO-8601 UTC with milliseconds, the time the event happened (not the Kafka timestamp)

A record is a dead letter, with exactly one error name, checked in this order:

    malformed_json        the value is not JSON, or is JSON but not an object
    missing_<field>       a required field is absent or null (first missing one in REQUIRED order)
    invalid_amount        amount is valid JSON of another type (a word, true, an object, ...)
    unknown_event_type    event_type not in EVENT_TYPES
    negative_amount       amount < 0
    invalid_event_time    event_time does not parse as EVENT_TIME_FORMAT

The value is parsed twice: against SCHEMA, and against LOOSE_SCHEMA, every field a string (Spark's
JSON reader takes any JSON value as a string field's text). A value the loose parse refuses is not a
JSON object; one only the typed parse refuses has a field of the wrong type - amount, the one field
that is not a string. (A numeric string such as "12.34" is read as a number by Spark's reader and
passes as an amount.)

Who may call it: any thread; these are constants and pure column expressions.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, StringType, StructField, StructType

EVENT_TYPES = ("view", "click", "purchase", "refund")
REQUIRED = ("event_id", "user_id", "event_type", "amount", "event_time")
# Spark datetime pattern for the generator's output ("X" accepts the literal Z as UTC).
EVENT_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"
CORRUPT = "_corrupt_record"

SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("user_id", StringType()),
    StructField("event_type", StringType()),
    StructField("amount", DecimalType(12, 2)),
    StructField("event_time", StringType()),
    StructField(CORRUPT, StringType()),
])

LOOSE_SCHEMA = StructType([StructField(f.name, StringType()) for f in SCHEMA.fields])

JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def parsed(value_text: Column) -> Column:
    """The value parsed against SCHEMA; a value that does not fit lands whole in _corrupt_record."""
    return F.from_json(value_text, SCHEMA, JSON_OPTIONS)


def loosely_parsed(value_text: Column) -> Column:
    """The value parsed against LOOSE_SCHEMA: fails (null or _corrupt_record) only when it is not a JSON object."""
    return F.from_json(value_text, LOOSE_SCHEMA, JSON_OPTIONS)


def event_time(e: Column) -> Column:
    return F.try_to_timestamp(e["event_time"], F.lit(EVENT_TIME_FORMAT))


def error(e: Column, loose: Column) -> Column:
    """The dead-letter reason for the event parsed as ``e`` (``parsed``) and ``loose``
    (``loosely_parsed``), or null when the event is valid."""
    check = F.when(loose.isNull() | loose[CORRUPT].isNotNull(), F.lit("malformed_json"))
    for name in REQUIRED:
        check = check.when(loose[name].isNull(), F.lit(f"missing_{name}"))
    return (check
            # Only amount can fail the typed parse once the loose one took every field.
            .when(e.isNull() | e[CORRUPT].isNotNull(), F.lit("invalid_amount"))
            .when(~e["event_type"].isin(*EVENT_TYPES), F.lit("unknown_event_type"))
            .when(e["amount"] < 0, F.lit("negative_amount"))
            .when(event_time(e).isNull(), F.lit("invalid_event_time")))
