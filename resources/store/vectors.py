"""Embeddings kept as numbers: a vector of float32 origin in a `FLOAT[]` column, any other one as
the JSON text it came as.

An export's vector (Neo.mjs, through Chroma, holds float32 values and JSON.stringify writes each as
the shortest decimal of that value as a double) arrives as JSON text. The ingest checks that text
cheaply (`digest.ingest.embedding_text`) and the store parses it (DuckDB's JSON reader, correctly
rounded) as it writes the batch: a vector whose every number is a double equal to its
own float32 rounding goes into `embedding_f32` (4 bytes a number, exact), and its text is dropped;
any other vector (float64 values, a number DuckDB does not read, a number out of float32's range)
keeps its text in `embedding`, verbatim, as before. Exactly one of the two is set for a row with a
vector.

An archive writes `embedding_f32` back with DuckDB's `to_json`, which writes each float32 as the
shortest decimal that reads back as the same double (tests/test_vectors.py checks it over random
bit patterns, subnormals and the extremes): the JSON numbers parse to exactly the values the export
held. The text of the other vectors goes back verbatim.
"""

from __future__ import annotations

import duckdb

VECTOR_TABLES = ("turns", "imported_summaries")


def _f32_exact(parsed: str) -> str:
    """SQL: whether the parsed DOUBLE[] `parsed` is a non-empty vector of float32 values. Every
    element must have parsed (a NULL for a string), and fit float32 (TRY_CAST leaves a NULL). A
    vector holding a negative zero keeps its text: DuckDB 1.5.6's INSERT ... ON CONFLICT stores
    -0.0 as 0.0 (JSON.stringify never writes one: it writes -0 as `0`)."""
    return (
        f"coalesce(len({parsed}) > 0 AND list_count({parsed}) = len({parsed}) "
        f"AND TRY_CAST({parsed} AS FLOAT[])::DOUBLE[] = {parsed} "
        f"AND len(list_filter({parsed}, x -> x = 0 AND signbit(x))) = 0, false)"
    )


def parse_vector_sql(text: str) -> str:
    """SQL: the JSON text `text` as DOUBLE[] (NULL if it is not a JSON array; an element that is not
    a number is NULL). DuckDB's JSON reader (yyjson) reads each number correctly rounded, three
    times as fast as a VARCHAR-to-list cast."""
    return f"""TRY(json_transform({text}, '["DOUBLE"]'))"""


def split_vectors_sql(source: str, text: str = "embedding") -> str:
    """A SELECT over `source` (a table, view or registered frame with the vector's JSON text in
    column `text`) giving the same columns with `embedding` (the text, kept only where the vector is
    not of float32 origin) and `embedding_f32` (the vector where it is). The text is parsed once."""
    exact = _f32_exact("_vector")
    return f"""SELECT * EXCLUDE ({text}, _vector, _exact),
            CASE WHEN _exact THEN NULL ELSE {text} END AS embedding,
            CASE WHEN _exact THEN _vector::FLOAT[] END AS embedding_f32
        FROM (SELECT *, {exact} AS _exact
              FROM (SELECT *, {parse_vector_sql(text)} AS _vector FROM {source}))"""


def vector_json_sql(alias: str = "") -> str:
    """SQL: a row's vector as JSON text, NULL for none (the kept text verbatim, else `embedding_f32`
    written as the shortest decimals that read back as the same doubles)."""
    prefix = f"{alias}." if alias else ""
    return f"coalesce({prefix}embedding, to_json({prefix}embedding_f32)::VARCHAR)"


def convert_text_vectors(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """Move the float32-origin vectors still held as text in `table` into `embedding_f32` (the rest
    keep their text); returns the rows converted. Used by the migration below, and after a restore
    of a bundle written before `embedding_f32` (its table files carry text)."""
    exact = _f32_exact(parse_vector_sql("embedding"))
    return con.execute(
        f"UPDATE {table} SET embedding_f32 = {parse_vector_sql('embedding')}::FLOAT[], embedding = NULL "
        f"WHERE embedding IS NOT NULL AND embedding_f32 IS NULL AND {exact}"
    ).fetchone()[0]


def migrate_text_vectors(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The store's migration to numeric vectors, in the caller's transaction: where `embedding_f32`
    is missing (a store from before it), add it and convert that table's text vectors, nothing
    lost (a vector not of float32 origin keeps its text). A no-op once the column is there: new
    rows are written split. Returns the rows converted per table.

    Self-contained so that it can become one numbered migration as it stands (its column check is
    then the migration's number)."""
    converted: dict[str, int] = {}
    for table in VECTOR_TABLES:
        present = con.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ? AND column_name = 'embedding_f32'",
            [table],
        ).fetchone()[0]
        if present:
            continue
        con.execute(f"ALTER TABLE {table} ADD COLUMN embedding_f32 FLOAT[]")
        converted[table] = convert_text_vectors(con, table)
    return converted
