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
