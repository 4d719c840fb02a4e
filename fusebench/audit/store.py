"""An audit in the results store: its run row (the request says `"kind": "audit"`, no cells) and
four tables keyed by run id, created the first time an audit is saved.

- `audits`: one row per audit (model, mode, dtype, sizes, device, backends, ceilings, notes),
- `audit_steps`, `audit_kernels`, `audit_regions`: one row per StepRow, KernelRow, RegionRow.

Each table's columns are the fields of its dataclass (fusebench/audit/result.py); lists and
dicts are stored as JSON text.  A field added to a dataclass becomes a column the next time an
audit is saved; a column a reader does not know is ignored, and one it lacks reads as the
field's default.  An audit is saved in one transaction: all its rows or none.
"""
from __future__ import annotations

import dataclasses
import json

from fusebench.audit.result import AuditResult, KernelRow, RegionRow, StepRow
from fusebench.store import Store, StoreError

HEADER_FIELDS = [f for f in dataclasses.fields(AuditResult) if f.name not in ("steps", "kernels", "regions")]
TABLES = {"audit_steps": StepRow, "audit_kernels": KernelRow, "audit_regions": RegionRow}
# The table of each audit's own fields (one row per audit).
HEADER_TABLE = "audits"


def _sql_type(annotation: str) -> str:
    """SQLite type of a dataclass field from its annotation (a string under postponed evaluation)."""
    text = str(annotation)
    if text.startswith(("list", "dict")):
        return "TEXT"  # JSON
    if "float" in text:
        return "REAL"
    if text.split(" ")[0] == "int":
        return "INTEGER"
    return "TEXT"


def _is_json(annotation: str) -> bool:
    return str(annotation).startswith(("list", "dict"))


def _columns(fields) -> dict[str, str]:
    return {f.name: _sql_type(f.type) for f in fields}


def _q(name: str) -> str:
    """A quoted identifier: field names such as `index` are SQL keywords."""
    return '"' + name.replace('"', '""') + '"'


SCHEMAS = {HEADER_TABLE: (HEADER_FIELDS, "run_id INTEGER PRIMARY KEY REFERENCES runs(id)")}
SCHEMAS.update({name: (dataclasses.fields(cls), "id INTEGER PRIMARY KEY AUTOINCREMENT, "
                                                "run_id INTEGER NOT NULL REFERENCES runs(id)")
                for name, cls in TABLES.items()})


def _ensure_tables(con) -> None:
    """Create the audit tables, and the columns an older store's tables lack (inside the caller's
    transaction)."""
    for table, (fields, key) in SCHEMAS.items():
        cols = ", ".join(f"{_q(n)} {t}" for n, t in _columns(fields).items())
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({key}, {cols})")
        have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        for name, sql in _columns(fields).items():
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {_q(name)} {sql}")
        if table != HEADER_TABLE:
            con.execute(f"CREATE INDEX IF NOT EXISTS {table}_run ON {table} (run_id)")


def _plain(value):
    """A value SQLite and JSON take: numpy scalars become Python numbers."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def _encode(fields, obj) -> list:
    return [json.dumps(getattr(obj, f.name), default=_plain) if _is_json(f.type) else _plain(getattr(obj, f.name))
            for f in fields]


def save(store: Store, run_id: int, result: AuditResult) -> None:
    """Store `result` as run `run_id`'s audit, replacing any saved before, in one transaction."""
    if store.readonly:
        raise StoreError(f"{store.path} is open read-only: cannot save an audit to it")
    store.run_info(run_id)  # raises if there is no such run
    con = store.con
    if con.in_transaction:
        con.commit()
    con.execute("BEGIN")
    try:
        _ensure_tables(con)
        for table in SCHEMAS:
            con.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
        names = [f.name for f in HEADER_FIELDS]
        con.execute(f"INSERT INTO {HEADER_TABLE} (run_id, {', '.join(map(_q, names))}) "
                    f"VALUES (?, {', '.join('?' * len(names))})", [run_id, *_encode(HEADER_FIELDS, result)])
        for table, rows in (("audit_steps", result.steps), ("audit_kernels", result.kernels),
                            ("audit_regions", result.regions)):
            fields = SCHEMAS[table][0]
            names = [f.name for f in fields]
            con.executemany(f"INSERT INTO {table} (run_id, {', '.join(map(_q, names))}) "
                            f"VALUES (?, {', '.join('?' * len(names))})",
                            [[run_id, *_encode(fields, row)] for row in rows])
        con.commit()
    except BaseException:
        con.rollback()
        raise


def _tables(store: Store) -> set[str]:
    return _tables_of(store.con)


def _tables_of(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def copy_audit_rows(source_con, run_id: int, target_con, new_run_id: int) -> int:
    """Copy run `run_id`'s audit rows from one store's connection to another's as run
    `new_run_id` (a merge), inside the caller's transaction: it neither begins nor commits.  The
    columns both stores have are copied; returns the number of rows copied (0 for a run of cells)."""
    have = _tables_of(source_con)
    if not any(t in have for t in SCHEMAS):
        return 0
    _ensure_tables(target_con)
    copied = 0
    for table in SCHEMAS:
        if table not in have:
            continue
        mine = {r[1] for r in target_con.execute(f"PRAGMA table_info({table})")}
        cols = [r[1] for r in source_con.execute(f"PRAGMA table_info({table})")
                if r[1] in mine and r[1] not in ("id", "run_id")]
        rows = source_con.execute(f"SELECT {', '.join(map(_q, cols))} FROM {table} WHERE run_id=?"
                                  f"{'' if table == HEADER_TABLE else ' ORDER BY id'}", (run_id,)).fetchall()
        target_con.executemany(f"INSERT INTO {table} (run_id, {', '.join(map(_q, cols))}) "
                               f"VALUES (?, {', '.join('?' * len(cols))})", [(new_run_id, *r) for r in rows])
        copied += len(rows)
    return copied


def _read(store: Store, table: str, run_id: int) -> list[dict]:
    """The rows of `table` for `run_id` as {field: value}, JSON decoded, in the order stored."""
    fields = {f.name: f for f in SCHEMAS[table][0]}
    order = "" if table == HEADER_TABLE else " ORDER BY id"
    cur = store.con.execute(f"SELECT * FROM {table} WHERE run_id=?{order}", (run_id,))
    names = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        item = {}
        for name, value in zip(names, row):
            field = fields.get(name)
            if field is None:
                continue  # run_id, id, or a column of a newer fusebench
            if _is_json(field.type) and value is not None:
                try:
                    value = json.loads(value)
                except (TypeError, ValueError):
                    raise StoreError(f"run {run_id}'s {table} holds unreadable JSON in {name}: "
                                     f"{str(value)[:40]!r}") from None
            item[name] = value
        out.append(item)
    return out


def load(store: Store, run_id: int) -> AuditResult:
    """Run `run_id`'s audit.  StoreError if the run is not an audit, or holds no results (an audit
    interrupted or failed before its measurement finished)."""
    info = store.run_info(run_id)
    if not is_audit_info(info):
        raise StoreError(f"run {run_id} in {store.path} is not an audit")
    if HEADER_TABLE not in _tables(store) or not _read(store, HEADER_TABLE, run_id):
        raise StoreError(f"run {run_id} is an audit that stored no results (its status: {info.get('status')}); "
                         f"run the audit again")
    try:
        head = _read(store, HEADER_TABLE, run_id)[0]
        return AuditResult.from_dict({**head, "steps": _read(store, "audit_steps", run_id),
                                      "kernels": _read(store, "audit_kernels", run_id),
                                      "regions": _read(store, "audit_regions", run_id)})
    except TypeError as exc:  # a row that does not make its dataclass (a required value missing)
        raise StoreError(f"run {run_id}'s audit rows in {store.path} are incomplete: {exc}") from None


def request_of(info: dict) -> dict:
    """A run row's stored request as a dict ({} where unreadable)."""
    try:
        request = json.loads(info.get("request") or "{}")
    except (TypeError, ValueError):
        return {}
    return request if isinstance(request, dict) else {}


def is_audit_info(info: dict) -> bool:
    return request_of(info).get("kind") == "audit"


def is_audit(store: Store, run_id: int) -> bool:
    """Whether run `run_id` is an audit (its request's kind).  StoreError if there is no such run."""
    return is_audit_info(store.run_info(run_id))


def audit_summary(request: dict | str | None) -> str | None:
    """One line naming what an audit measured, from a run's request (a dict or its JSON text), e.g.
    "audit llama3-layer fwd_bwd bf16 batch=1 tokens=2048: eager, inductor"; None for a run that is
    not an audit."""
    if isinstance(request, str):
        request = request_of({"request": request})
    if not isinstance(request, dict) or request.get("kind") != "audit":
        return None
    audit = request.get("audit") if isinstance(request.get("audit"), dict) else {}
    sizes = audit.get("sizes") if isinstance(audit.get("sizes"), dict) else {}
    modes = audit.get("compile_modes") if isinstance(audit.get("compile_modes"), list) else []
    from fusebench.audit.request import backend_name

    backends = ["eager"] + [backend_name(str(m)) for m in modes]
    parts = ["audit", str(audit.get("model", "?")), str(audit.get("mode", "fwd"))]
    if audit.get("dtype"):
        parts.append(str(audit["dtype"]))
    parts += [f"{k}={v}" for k, v in sizes.items()]
    line = " ".join(parts) + ": " + ", ".join(backends)
    if audit.get("baseline") and audit.get("baseline") != "eager":
        line += f" (baseline {audit['baseline']})"
    return line
