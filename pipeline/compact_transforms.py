"""Store log lines -> compacted store log lines. Pure DataFrame -> DataFrame.

Theory of operation
-------------------
The router's store log (docs/store-log.md) is a fold: each record changes one
queue, and the state of a queue depends only on its own records, in log order.
So compaction is a group-by on the recipient id, and for each queue the fold
reduces to "which record of each kind came last". The one record without a
queue, `add_service`, is grouped by its service id instead (`!svc:<svc>`), and
the last one of each id is the service (docs/store-log.md, "Replay"). For queues:

- the queue exists iff it has a `create` and no `delete` after its last `create`
  (a change to an absent queue leaves it absent; `create` replaces everything);
- each field is the value from the latest record after that `create` that sets
  it, else the `create`'s own value: `secure` sets the sender key;
  `add_notifier` / `delete_notifier` set the notifier and clear its service;
  `set_service` sets the recipient or notifier service; `suspend` sets status;
  `set_link` sets the queue's link (`lid lfix lusr`), `delete_link` removes it;
  `set_recipient_keys` sets the recipient keys (`rkey rkeys`);
- `updated_at` is the time of the queue's latest record.

That is one hash aggregation with `max` / `max_by` over a sequence number
(file, split, row): no sort of the input, partial aggregation before the
shuffle. Lines that fail their checksum or do not parse are grouped under a
per-file key (`!bad:<file>`) so the job finds them without another scan.
The output lines are rebuilt with the router's field order and checksum, so
they equal `store.journal.storelog.compact_records` line for line after sorting.
With shards, every shard gets every `add_service` line: a queue's association
names its service by id, and a router opening one shard must know that service
by the same id, or its next handshake with that certificate would make another.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

BAD_KEY_PREFIX = "!bad:"  # never a recipient id: those are base64url
SERVICE_KEY_PREFIX = "!svc:"  # nor this: the key of a service's `add_service` lines
B64 = r"^[A-Za-z0-9_-]*={0,2}$"
INT = r"^-?[0-9]+$"

# every field each record may have, and those it must have (docs/store-log.md)
ALLOWED = {
    "add_service": "ts svc role cert chash",
    "create": (
        "ts rid sid rkey rdh skey secure status nid nkey ndh rsvc nsvc mode lid lfix lusr rkeys"
    ),
    "secure": "ts rid skey",
    "add_notifier": "ts rid nid nkey ndh",
    "delete_notifier": "ts rid",
    "suspend": "ts rid",
    "set_service": "ts rid party svc",
    "set_link": "ts rid lid lfix lusr",
    "delete_link": "ts rid",
    "set_recipient_keys": "ts rid rkey rkeys",
    "delete": "ts rid",
}
REQUIRED = {
    "add_service": "ts svc role cert chash",
    "create": "ts rid sid rkey rdh secure status",
    "secure": "ts rid skey",
    "add_notifier": "ts rid nid nkey ndh",
    "delete_notifier": "ts rid",
    "suspend": "ts rid",
    "set_service": "ts rid party",
    "set_link": "ts rid lid lfix lusr",
    "delete_link": "ts rid",
    "set_recipient_keys": "ts rid rkey",
    "delete": "ts rid",
}
CREATE_FIELDS = (
    "sid", "rkey", "rdh", "skey", "secure", "status", "nid", "nkey", "ndh",
    "mode", "lid", "lfix", "lusr", "rkeys",
)  # fmt: skip
SERVICE_ORDER = ("ts", "svc", "role", "cert", "chash")  # the fields of `add_service`, in order


def checksum(payload: Column) -> Column:
    """CRC-32 of the payload as 8 lowercase hex digits, as the router writes it."""
    return F.lpad(F.lower(F.hex(F.crc32(payload.cast("binary")))), 8, "0")


def _sql_list(words: str) -> str:
    return "array(" + ", ".join(f"'{w}'" for w in words.split()) + ")"


def _by_op(table: dict[str, str]) -> Column:
    """The field list of each record kind as an array column chosen by `op`."""
    cases = " ".join(f"WHEN '{op}' THEN {_sql_list(words)}" for op, words in table.items())
    return F.expr(f"CASE op {cases} END")


def _values_ok() -> Column:
    """Every field value has the form the router's decoder accepts."""
    return F.expr(
        f"""forall(map_entries(f), e -> e.value IS NOT NULL AND CASE e.key
        WHEN 'ts' THEN e.value RLIKE '{INT}'
        WHEN 'secure' THEN e.value IN ('0', '1')
        WHEN 'status' THEN e.value IN ('active', 'off')
        WHEN 'party' THEN e.value IN ('r', 'n')
        WHEN 'mode' THEN e.value IN ('M', 'C')
        WHEN 'role' THEN e.value IN ('M', 'N', 'P')
        WHEN 'rkeys' THEN forall(split(e.value, ','),
            k -> k RLIKE '{B64}' AND length(k) % 4 = 0)
        ELSE e.value RLIKE '{B64}' AND length(e.value) % 4 = 0 END)"""
    )


def _whole(*keys: str) -> Column:
    """A group of fields (a notifier, a link) comes with all its fields or none of them."""
    names = ", ".join(f"'{k}'" for k in keys)
    return F.expr(f"size(filter(array({names}), k -> map_contains_key(f, k))) IN (0, {len(keys)})")


def parse_store_lines(raw: DataFrame) -> DataFrame:
    """(file_no, block, row, value) -> (key, seq, op, ts, f) with `key` the recipient id,
    `!svc:<svc>` for an `add_service` line, or `!bad:<file_no>` for a line the router
    would not read."""
    payload = F.expr("substring(value, 10)")
    with_payload = raw.select(
        F.struct("file_no", "block", "row").alias("seq"),
        "file_no",
        "value",
        (F.substring("value", 9, 1) == " ") & (F.substring("value", 1, 8) == checksum(payload)),
        payload.alias("payload"),
    ).toDF("seq", "file_no", "value", "crc_ok", "payload")
    op = F.substring_index("payload", " ", 1)
    fields = F.str_to_map(
        F.expr("substring(payload, length(substring_index(payload, ' ', 1)) + 2)"),
        F.lit(" "),
        F.lit("="),
    )
    parsed = with_payload.select(
        "seq",
        "file_no",
        "value",
        "crc_ok",
        op.alias("op"),
        F.when(F.col("crc_ok"), fields).alias("f"),
    )
    good = (
        F.col("crc_ok")
        & F.col("op").isin(*ALLOWED)
        & F.forall(F.map_keys("f"), lambda k: F.array_contains(_by_op(ALLOWED), k))
        & F.forall(_by_op(REQUIRED), lambda k: F.map_contains_key("f", k))
        & _values_ok()
        & _whole("nid", "nkey", "ndh")
        & _whole("lid", "lfix", "lusr")
    )
    # `good` is computed once per line, in its own projection
    checked = parsed.select("*", F.coalesce(good, F.lit(False)).alias("good"))
    own_key = F.when(
        F.col("op") == "add_service", F.concat(F.lit(SERVICE_KEY_PREFIX), F.col("f")["svc"])
    ).otherwise(F.col("f")["rid"])
    return checked.select(
        F.when(F.col("good"), own_key)
        .otherwise(F.concat(F.lit(BAD_KEY_PREFIX), F.col("file_no").cast("string")))
        .alias("key"),
        "seq",
        F.when(F.col("good"), F.col("op")).alias("op"),
        F.when(F.col("good"), F.col("f")["ts"].cast("long")).alias("ts"),
        F.when(F.col("good"), F.col("f")).alias("f"),
        "value",
    )


def _last(kind: Column) -> Column:
    """The sequence number of the queue's latest record of this kind."""
    return F.max(F.when(kind, F.col("seq")))


def _value_of_last(value: Column, kind: Column) -> Column:
    return F.max_by(value, F.when(kind, F.col("seq")))


def fold_queues(parsed: DataFrame) -> DataFrame:
    """One row per key: the latest record of each kind and its value (see the theory)."""
    op, f = F.col("op"), F.col("f")
    is_create = op == "create"
    notifier_change = op.isin("add_notifier", "delete_notifier")
    rcv_service = (op == "set_service") & (f["party"] == "r")
    ntf_service = (op == "set_service") & (f["party"] == "n")
    new_notifier = F.when(
        op == "add_notifier",
        F.struct(f["nid"].alias("nid"), f["nkey"].alias("nkey"), f["ndh"].alias("ndh")),
    )
    link_change = op.isin("set_link", "delete_link")
    new_link = F.when(
        op == "set_link",
        F.struct(f["lid"].alias("lid"), f["lfix"].alias("lfix"), f["lusr"].alias("lusr")),
    )
    return parsed.groupBy("key").agg(
        F.count("*").alias("lines"),
        F.max_by("value", "seq").alias("last_value"),
        _last(is_create).alias("c_seq"),
        _value_of_last(
            F.struct(*(f[k].alias(k) for k in ("rsvc", "nsvc", *CREATE_FIELDS))), is_create
        ).alias("cr"),
        _last(op == "delete").alias("d_seq"),
        _last(op == "secure").alias("s_seq"),
        _value_of_last(f["skey"], op == "secure").alias("s_val"),
        _last(notifier_change).alias("n_seq"),
        _value_of_last(new_notifier, notifier_change).alias("n_val"),
        _last(op == "suspend").alias("off_seq"),
        _last(rcv_service).alias("r_seq"),
        _value_of_last(f["svc"], rcv_service).alias("r_val"),
        _last(notifier_change | ntf_service).alias("ns_seq"),
        _value_of_last(F.when(ntf_service, f["svc"]), notifier_change | ntf_service).alias(
            "ns_val"
        ),
        _last(link_change).alias("l_seq"),
        _value_of_last(new_link, link_change).alias("l_val"),
        _last(op == "set_recipient_keys").alias("k_seq"),
        _value_of_last(
            F.struct(f["rkey"].alias("rkey"), f["rkeys"].alias("rkeys")),
            op == "set_recipient_keys",
        ).alias("k_val"),
        F.max_by("ts", "seq").alias("updated_at"),
        _value_of_last(
            F.struct(*(f[k].alias(k) for k in SERVICE_ORDER)), op == "add_service"
        ).alias("svc"),
    )


def _after_create(seq: str, value: Column, default: Column) -> Column:
    return F.when(F.col(seq) > F.col("c_seq"), value).otherwise(default)


def _is_service() -> Column:
    return F.col("key").startswith(SERVICE_KEY_PREFIX) & F.col("svc").isNotNull()


def _exists() -> Column:
    return (
        ~F.col("key").startswith(BAD_KEY_PREFIX)
        & F.col("c_seq").isNotNull()
        & (F.col("d_seq").isNull() | (F.col("d_seq") < F.col("c_seq")))
    )


def _queue_columns() -> list[Column]:
    """Every field of a queue's `create` line, from the fold's columns."""
    cr = F.col("cr")
    notifier = _after_create("n_seq", F.col("n_val"), F.struct(cr["nid"], cr["nkey"], cr["ndh"]))
    link = _after_create("l_seq", F.col("l_val"), F.struct(cr["lid"], cr["lfix"], cr["lusr"]))
    keys = _after_create("k_seq", F.col("k_val"), F.struct(cr["rkey"], cr["rkeys"]))
    return [
        F.col("updated_at").alias("ts"),
        F.col("key").alias("rid"),
        cr["sid"].alias("sid"),
        keys.getField("rkey").alias("rkey"),
        cr["rdh"].alias("rdh"),
        _after_create("s_seq", F.col("s_val"), cr["skey"]).alias("skey"),
        cr["secure"].alias("secure"),
        _after_create("off_seq", F.lit("off"), cr["status"]).alias("status"),
        notifier.getField("nid").alias("nid"),
        notifier.getField("nkey").alias("nkey"),
        notifier.getField("ndh").alias("ndh"),
        _after_create("r_seq", F.col("r_val"), cr["rsvc"]).alias("rsvc"),
        _after_create("ns_seq", F.col("ns_val"), cr["nsvc"]).alias("nsvc"),
        cr["mode"].alias("mode"),
        link.getField("lid").alias("lid"),
        link.getField("lfix").alias("lfix"),
        link.getField("lusr").alias("lusr"),
        keys.getField("rkeys").alias("rkeys"),
    ]


def live_queues(folded: DataFrame) -> DataFrame:
    """The queues the log leaves in place, with every field of their `create` line."""
    return folded.where(_exists()).select(*_queue_columns())


CREATE_ORDER = (
    "ts", "rid", "sid", "rkey", "rdh", "skey", "secure", "status",
    "nid", "nkey", "ndh", "rsvc", "nsvc", "mode", "lid", "lfix", "lusr", "rkeys",
)  # fmt: skip


def _create_line() -> Column:
    # concat() is null when the value is, and concat_ws() skips nulls: absent fields vanish
    pairs = [F.concat(F.lit(f"{name}="), F.col(name).cast("string")) for name in CREATE_ORDER]
    payload = F.concat_ws(" ", F.lit("create"), *pairs)
    return F.concat(checksum(payload), F.lit(" "), payload)


def _service_line() -> Column:
    svc = F.col("svc")
    pairs = [F.concat(F.lit(f"{name}="), svc[name]) for name in SERVICE_ORDER]
    payload = F.concat_ws(" ", F.lit("add_service"), *pairs)
    return F.concat(checksum(payload), F.lit(" "), payload)


def create_lines(queues: DataFrame) -> DataFrame:
    """(rid, line): each queue as the router's `create` line, checksum included."""
    return queues.select("rid", _create_line().alias("line"))


def shard_of(rid_b64: Column, shards: int) -> Column:
    """Shard of a queue: the first 32 bits of SHA-256(recipient id bytes), modulo `shards`.

    The same as `pipeline.compact_job.shard_of_id` in plain Python.
    """
    raw = F.unbase64(F.translate(rid_b64, "-_", "+/"))
    head = F.conv(F.substring(F.sha2(raw, 256), 1, 8), 16, 10).cast("long")
    return F.pmod(head, F.lit(shards)).cast("int")


BAD_SHARD = -1


def output_lines(folded: DataFrame, shards: int = 1) -> DataFrame:
    """(shard, line) of every live queue and every service (a service in every shard),
    plus one row per damaged input file in shard BAD_SHARD whose line is
    `file_no TAB count TAB latest bad line`.

    The job writes both at once and checks the BAD_SHARD rows before it moves
    the output into place: one pass over the input.
    """
    bad = F.col("key").startswith(BAD_KEY_PREFIX)
    kept = folded.where(bad | _is_service() | _exists()).select(
        bad.alias("bad"), _is_service().alias("service"), "key", "lines", "last_value", "svc",
        *_queue_columns()
    )
    bad_info = F.concat_ws(
        "\t",
        F.expr(f"substring(key, {len(BAD_KEY_PREFIX) + 1})"),
        F.col("lines").cast("string"),
        F.col("last_value"),
    )
    to_shards = (
        F.when(F.col("bad"), F.array(F.lit(BAD_SHARD)))
        .when(F.col("service"), F.sequence(F.lit(0), F.lit(shards - 1)))
        .otherwise(F.array(shard_of(F.col("rid"), shards)))
    )
    line = (
        F.when(F.col("bad"), bad_info)
        .when(F.col("service"), _service_line())
        .otherwise(_create_line())
    )
    return kept.select(F.explode(to_shards).alias("shard"), line.alias("line"))
