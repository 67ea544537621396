"""A file without the columns a task reads is refused in one line that names every missing column."""

from __future__ import annotations

import pytest

from domainbert.data.readers import read
from domainbert.errors import DomainBertError


def test_every_missing_column_is_named_with_the_columns_the_file_has(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("body,category\na b,x\nc d,y\n", encoding="utf-8")
    with pytest.raises(DomainBertError) as err:
        read(str(path), columns=("text", "label"), cache_dir=str(tmp_path / "cache"))
    assert str(err.value) == f"{path}: no column 'text', 'label'; the columns are ['body', 'category']"
    assert len(read(str(path), columns=("body", "category"), cache_dir=str(tmp_path / "cache"))) == 2


def _parquet(path, n: int = 200) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"text": f"row {i}", "label": "ab"[i % 2]} for i in range(n)]), path)
    return path.read_bytes()


def test_a_parquet_file_cut_off_is_refused_naming_it(tmp_path):
    data = _parquet(tmp_path / "whole.parquet")
    assert len(read(str(tmp_path / "whole.parquet"))) == 200
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DomainBertError) as err:
        read(str(cut))
    assert str(err.value) == (
        f"{cut}: the Parquet file is truncated: it lacks its footer (PAR1) after {len(data) // 2} bytes "
        "(copy or download it again)"
    )


def test_a_parquet_file_that_is_not_parquet_is_named(tmp_path):
    fake = tmp_path / "rows.parquet"
    fake.write_text('{"text": "a json line", "label": "a"}\n')
    with pytest.raises(DomainBertError, match=r"rows\.parquet: not a Parquet file \(it does not start with PAR1\)$"):
        read(str(fake))
